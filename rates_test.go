package shardlimit

// Tests of several rates per key (Config.Rates): all or nothing, the
// binding rate, RetryAfter the first instant every rate admits, limits
// per key and by default, and the time rule, for every algorithm, as step
// tables against hand-computed values; model_test.go checks the same
// against reference models on random sequences.

import (
	"testing"
	"time"
)

// TestRatesBoolFormsDecideAsResultForms: AllowAt decides as AllowN: a
// request the first rate denies still brings every rate's state to the
// decision's instant. GCRA keeps a rate's usage when its limit changes by
// re-encoding its debt at the key's next decision; a denied AllowAt that
// stopped at the first denying rate left the other rates encoded for
// their old limit, so they were re-encoded later, from a smaller debt,
// and the key admitted what AllowN's twin denied.
func TestRatesBoolFormsDecideAsResultForms(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			mk := func() Limiter {
				return mustNew(t, Config{Algorithm: alg, Buckets: 4, Rates: []Rate{{2, 2 * time.Second}, {4, time.Second}}})
			}
			a, b := mk(), mk()
			for _, l := range []Limiter{a, b} {
				if r := l.AllowN("k", at(0), 2); !r.Allowed {
					t.Fatalf("first burst denied: %+v", r)
				}
				// The 1 s rate's limit drops from 4 to 1 while the key
				// has used 2 of it.
				if err := l.SetDefaultLimits(2, 1); err != nil {
					t.Fatal(err)
				}
			}
			// Both denied by the 2 s rate (full until 1 s or 2 s).
			if a.AllowAt("k", at(0.1)) {
				t.Fatal("AllowAt admitted a request over the 2 s rate")
			}
			if r := b.AllowN("k", at(0.1), 1); r.Allowed {
				t.Fatalf("AllowN admitted a request over the 2 s rate: %+v", r)
			}
			for _, sec := range []float64{0.5, 1, 1.5, 1.9, 2, 2.5} {
				if pa, pb := a.Peek("k", at(sec), 1), b.Peek("k", at(sec), 1); pa != pb {
					t.Fatalf("peek at %v s after a denied AllowAt: %+v\nafter a denied AllowN: %+v", sec, pa, pb)
				}
			}
		})
	}
}
