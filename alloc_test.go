//go:build !race

package shardlimit

import (
	"testing"
	"time"
)

// Allocation counts are deterministic, so they are asserted here (the race
// detector allocates, hence the build tag).

// t0 is the instant the tests' times count from.
var t0 = time.Unix(1_700_000_000, 0)

// at returns t0 plus sec seconds.
func at(sec float64) time.Time { return t0.Add(time.Duration(sec * 1e9)) }

// mustNew returns cfg's limiter without a janitor, closed at the end of
// the test.
func mustNew(tb testing.TB, cfg Config) Limiter {
	tb.Helper()
	cfg.JanitorInterval = -1
	l, err := New(cfg)
	if err != nil {
		tb.Fatalf("New(%+v): %v", cfg, err)
	}
	tb.Cleanup(func() { l.Close() })
	return l
}

// cfgFor returns a Config of alg with buckets of g (0: the default).
func cfgFor(alg Algorithm, limit int, window, g time.Duration) Config {
	cfg := Config{Algorithm: alg, Limit: limit, Window: window}
	if g > 0 {
		cfg.Buckets = int(window / g)
	}
	return cfg
}

func TestNoAllocationsOnHotPath(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clock := NewManualClock(at(0))
			cfg := cfgFor(alg, 1000, time.Minute, time.Second)
			cfg.Clock = clock
			l := mustNew(t, cfg)
			key, bkey := "192.0.2.1", []byte("192.0.2.1")
			l.AllowN(key, at(0), 1)
			l.AllowN("denied", at(0), 1000)
			now := at(1)
			cases := map[string]func(){
				"AllowN":          func() { l.AllowN(key, now, 1) },
				"AllowN(3)":       func() { l.AllowN(key, now, 3) },
				"AllowBytesN":     func() { l.AllowBytesN(bkey, now, 1) },
				"Allow":           func() { l.Allow(key) },
				"AllowBytes":      func() { l.AllowBytes(bkey) },
				"AllowAt":         func() { l.AllowAt(key, now) },
				"AllowBytesAt":    func() { l.AllowBytesAt(bkey, now) },
				"Peek":            func() { l.Peek(key, now, 1) },
				"AllowN denied":   func() { l.AllowN("denied", now, 1) },
				"AllowN(0) new":   func() { l.AllowN("missing", now, 0) },
				"invalid cost":    func() { l.AllowN(key, now, -1) },
				"empty key":       func() { l.AllowN("", now, 1) },
				"above the limit": func() { l.AllowN(key, now, 1001) },
			}
			for name, f := range cases {
				for range 3000 { // fill rings and buckets first
					f()
				}
				if n := testing.AllocsPerRun(1000, f); n != 0 {
					t.Errorf("%s: %v allocations per call, want 0", name, n)
				}
			}
			// Window rotation reuses buckets and ring buffers.
			rot := mustNew(t, cfgFor(alg, 5, time.Second, 100*time.Millisecond))
			w := at(0)
			rot.AllowN("r", w, 5)
			if n := testing.AllocsPerRun(1000, func() {
				w = w.Add(time.Second)
				rot.AllowN("r", w, 5)
			}); n != 0 {
				t.Errorf("window rotation: %v allocations per call, want 0", n)
			}
		})
	}
}
