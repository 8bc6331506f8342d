package core

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// Tests of limits per key and by default, with one rate and several:
// changes at runtime, bans (a limit of 0), Reset.

func TestZeroLimit(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingLog, SlidingCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			l := mustNew(t, cfgFor(alg, 5, time.Minute, time.Second))
			if err := l.SetLimit("blocked", 0); err != nil {
				t.Fatal(err)
			}
			for _, sec := range []float64{0, 1, 59.999, 60, 3600} {
				r := l.AllowN("blocked", at(sec), 1)
				if r.Allowed || r.Remaining != 0 || r.RetryAfter != Never || r.Limit != 0 || r.Err != nil {
					t.Fatalf("t=%v: %+v", sec, r)
				}
				if r := l.AllowN("blocked", at(sec), 0); !r.Allowed {
					t.Fatalf("t=%v: peek denied", sec)
				}
			}
			admitted := 0
			for range 1000 {
				if l.AllowN("blocked", at(3600), 1).Allowed {
					admitted++
				}
			}
			if admitted != 0 {
				t.Fatalf("limit 0 admitted %d", admitted)
			}
			wantErr(t, l.SetLimit("blocked", -1), ErrInvalidConfig)
			_, err := New(Config{Algorithm: alg, Limit: -1, Window: time.Minute})
			wantErr(t, err, ErrInvalidConfig)

			retry := map[Algorithm]int64{FixedWindow: 20, SlidingLog: 60, SlidingCounter: 61}[alg]
			l = mustNew(t, cfgFor(alg, 5, time.Minute, time.Second))
			l.SetLimit("blocked", 0)
			for _, sec := range []float64{0, 1, 59.999, 60} {
				l.AllowN("blocked", at(sec), 1)
			}
			if err := l.SetLimit("blocked", 3); err != nil {
				t.Fatal(err)
			}
			runSteps(t, l, "blocked", concat(countdown(100, 3, 0), []step{{100, 1, false, 0, retry}}))

			// A default limit of 0 blocks every key too.
			l = mustNew(t, cfgFor(alg, 0, time.Minute, time.Second))
			if r := l.AllowN("any", at(0), 1); r.Allowed || r.RetryAfter != Never {
				t.Fatalf("default limit 0: %+v", r)
			}
		})
	}
	// GCRA: a ban keeps the usage, lifting it restores it exactly.
	l := mustNew(t, cfgFor(GCRA, 4, 40*time.Second, 0))
	runSteps(t, l, "k", countdown(0, 3, 1))
	l.SetLimit("k", 0)
	if r := l.AllowN("k", at(1), 1); r.Allowed || r.RetryAfter != Never {
		t.Fatalf("banned: %+v", r)
	}
	l.ClearLimit("k")
	// 3 units used at t=0, one refilled per 10 s: at t=10 two remain.
	runSteps(t, l, "k", []step{{10, 1, true, 1, 0}, {10, 1, true, 0, 0}, {10, 1, false, 0, 10}})
}

func TestRaiseLimitAtRuntime(t *testing.T) {
	type cell struct {
		allowed bool
		rem     int
		retry   int64
	}
	A := func(rem int) cell { return cell{true, rem, 0} }
	D := func(retry int64) cell { return cell{false, 0, retry} }
	tables := map[Algorithm][5][]cell{
		FixedWindow:    {{A(1), A(0), D(60)}, {A(2), A(1), A(0), D(50)}, {D(40)}, {A(0)}, {D(50)}},
		SlidingLog:     {{A(1), A(0), D(60)}, {A(2), A(1), A(0), D(50)}, {D(50)}, {D(10)}, {A(0)}},
		SlidingCounter: {{A(1), A(0), D(61)}, {A(2), A(1), A(0), D(51)}, {D(51)}, {D(11)}, {D(1)}},
	}
	times := [5]float64{0, 10, 20, 60, 70}
	limits := [5]int{2, 5, 1, 0, 0}
	for alg, rows := range tables {
		t.Run(alg.String(), func(t *testing.T) {
			l := mustNew(t, cfgFor(alg, 100, time.Minute, time.Second))
			for i, row := range rows {
				if limits[i] > 0 {
					if err := l.SetLimit("k", limits[i]); err != nil {
						t.Fatal(err)
					}
				}
				for j, c := range row {
					r := l.AllowN("k", at(times[i]), 1)
					checkStep(t, i*10+j, r, step{times[i], 1, c.allowed, c.rem, c.retry})
					if r.Limit != limits[min(i, 2)] {
						t.Fatalf("t=%v: limit %d", times[i], r.Limit)
					}
				}
			}
		})
	}
}

func TestPerKeyLimit(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingLog} {
		l := mustNew(t, cfgFor(alg, 5, time.Minute, 0))
		if err := l.SetLimit("A", 2); err != nil {
			t.Fatal(err)
		}
		runSteps(t, l, "A", []step{{0, 1, true, 1, 0}, {0, 1, true, 0, 0}, {0, 1, false, 0, 60}})
		runSteps(t, l, "B", concat(countdown(0, 5, 0), []step{{0, 1, false, 0, 60}}))
		if r := l.Peek("A", at(0), 0); r.Limit != 2 {
			t.Fatalf("A's limit %d", r.Limit)
		}
	}
}

// TestLimitChangesKeepEveryRatesUsage: a tier set with SetLimits counts the usage
// the key already has against each new limit; the sliding log keeps every
// stamp (its ring shrinks later, under the skips of the shorter window).
func TestLimitChangesKeepEveryRatesUsage(t *testing.T) {
	set := func(l Limiter, lims ...int) {
		t.Helper()
		if err := l.SetLimits("k", lims...); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("sliding_log", func(t *testing.T) {
		l := mustNew(t, Config{Algorithm: SlidingLog, Rates: []Rate{{3, time.Second}, {10, 10 * time.Second}}})
		runRateSteps(t, l, "k", []rstep{
			{0, 3, true, 0, 3, w1s, 0},
			{1, 3, true, 0, 3, w1s, 0},
			{2, 3, true, 0, 3, w1s, 0}, // 10 s: 1 left
		})
		set(l, 5, 9)
		runRateSteps(t, l, "k", []rstep{{2.5, 1, false, 0, 9, w10s, ms(7500)}})
		set(l, 5, 20)
		runRateSteps(t, l, "k", []rstep{{2.5, 2, true, 0, 5, w1s, 0}}) // 10 s: 11 of 20
		set(l, 3, 10)                                                  // both rates above their limit now
		runRateSteps(t, l, "k", []rstep{
			{2.6, 1, false, 0, 10, w10s, ms(7400)},
			{10, 3, false, 2, 10, w10s, time.Second}, // the second is empty, 10 s holds 8
			// The ring (16 stamps since the limit of 20) shrinks to 10
			// while the second's skip counts 8 stamps.
			{10, 2, true, 0, 10, w10s, 0},
			{10.5, 1, false, 0, 10, w10s, ms(500)},
			{11, 1, true, 2, 10, w10s, 0}, // the second at 2 left too
			{11, 2, true, 0, 10, w10s, 0}, // 10 s: 10; the second: 3
			{11.5, 1, false, 0, 10, w10s, ms(500)},
		})
		ll := l.(*LogLimiter)
		s := ll.tab.shardFor(ll.tab.hash("k"))
		s.mu.Lock()
		slot, _ := find(s, ll.tab.hash("k"), "k")
		if r := s.rec(slot); r.cap != 10 || r.count != 10 {
			t.Errorf("ring of capacity %d holding %d stamps, want 10 and 10", r.cap, r.count)
		}
		s.mu.Unlock()
	})
	t.Run("gcra", func(t *testing.T) {
		// Emission intervals 250 ms and 6 s; the debt scales by old/new.
		l := mustNew(t, Config{Algorithm: GCRA, Rates: []Rate{{4, time.Second}, {10, time.Minute}}})
		runRateSteps(t, l, "k", []rstep{{0, 4, true, 0, 4, w1s, 0}})
		set(l, 2, 5) // debts 1 s -> 2 s, 24 s -> 48 s
		runRateSteps(t, l, "k", []rstep{
			{0, 1, false, 0, 2, w1s, ms(1500)},
			{1.5, 1, true, 0, 5, w1m, 0},
		})
		set(l, 4, 10) // debts 1 s -> 0.5 s, 58.5 s -> 29.25 s
		runRateSteps(t, l, "k", []rstep{
			{1.5, 0, true, 2, 4, w1s, 0},
			{1.5, 3, false, 2, 4, w1s, ms(250)},
		})
		if err := l.ClearLimit("k"); err != nil {
			t.Fatal(err)
		}
		if err := l.SetDefaultLimits(2, 10); err != nil {
			t.Fatal(err)
		}
		// The second's default drops to 2: its debt of 0.5 s doubles at
		// the key's next decision.
		runRateSteps(t, l, "k", []rstep{{1.5, 1, false, 0, 2, w1s, ms(500)}})
	})
	t.Run("fixed_window", func(t *testing.T) {
		l := mustNew(t, Config{Algorithm: FixedWindow, Rates: twoRates})
		runRateSteps(t, l, "k", []rstep{{0, 3, true, 0, 3, w1s, 0}, {1, 3, true, 0, 3, w1s, 0}})
		set(l, 10, 5) // the minute holds 6 of 5
		runRateSteps(t, l, "k", []rstep{{2, 1, false, 0, 5, w1m, 58 * time.Second}})
		set(l, 10, 8)
		runRateSteps(t, l, "k", []rstep{{2, 2, true, 0, 8, w1m, 0}, {2, 1, false, 0, 8, w1m, 58 * time.Second}})
	})
	t.Run("sliding_counter", func(t *testing.T) {
		l := mustNew(t, Config{Algorithm: SlidingCounter, Rates: twoRates, Buckets: 10})
		runRateSteps(t, l, "k", []rstep{{0, 3, true, 0, 3, w1s, 0}, {1.1, 3, true, 0, 3, w1s, 0}})
		set(l, 10, 5) // the minute holds 6 of 5 in its bucket 0
		runRateSteps(t, l, "k", []rstep{{2, 1, false, 0, 5, w1m, anyRetry}})
		set(l, 10, 8)
		runRateSteps(t, l, "k", []rstep{{2, 2, true, 0, 8, w1m, 0}, {2, 1, false, 0, 8, w1m, anyRetry}})
	})
}

// TestZeroLimitOnAnyRateBans: a limit of 0 on any one rate bans the key, whatever
// the others allow; lifting it restores the key's usage. Other keys keep
// the defaults.
func TestZeroLimitOnAnyRateBans(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l := mustNew(t, rateCfg(alg, twoRates))
			if r := l.AllowN("k", at(0), 2); !r.Allowed {
				t.Fatalf("first call: %+v", r)
			}
			for _, ban := range [][]int{{0, 10}, {3, 0}, {0, 0}} {
				if err := l.SetLimits("k", ban...); err != nil {
					t.Fatal(err)
				}
				win := w1m // both at 0 remaining: ties to the longest window
				if ban[1] != 0 {
					win = w1s
				}
				for _, sec := range []float64{0.5, 100, 1e6} {
					for _, n := range []int{1, 2, 11} {
						r := l.Peek("k", at(sec), n)
						if r.Allowed || r.RetryAfter != Never || r.Limit != 0 || r.Remaining != 0 || r.Window != win {
							t.Fatalf("banned %v, peek n=%d at %v s: %+v", ban, n, sec, r)
						}
					}
				}
				if r := l.AllowN("k", at(0.5), 1); r.Allowed || r.RetryAfter != Never || r.Window != win {
					t.Fatalf("banned %v: %+v", ban, r)
				}
				if l.AllowAt("k", at(0.5)) || l.AllowBytesAt([]byte("k"), at(0.5)) {
					t.Fatalf("banned %v: admitted by a bool form", ban)
				}
				if r := l.AllowN("k", at(0.5), 0); !r.Allowed {
					t.Fatalf("banned %v: a peek of 0 units denied: %+v", ban, r)
				}
				if r := l.AllowN(fmt.Sprint("other", ban), at(0.5), 3); !r.Allowed {
					t.Fatalf("banned %v: another key denied: %+v", ban, r)
				}
			}
			if err := l.ClearLimit("k"); err != nil {
				t.Fatal(err)
			}
			// The 2 units of 0 s still count in the second (GCRA has
			// refilled 1.5 of them by 0.5 s).
			want := 1
			if alg == GCRA {
				want = 2
			}
			got := 0
			for got <= 3 && l.AllowN("k", at(0.5), 1).Allowed {
				got++
			}
			if got != want {
				t.Fatalf("after the ban was lifted: %d admitted at 0.5 s, want %d", got, want)
			}
		})
	}
}

// TestDefaultLimitsPerRate: SetDefaultLimits takes one limit per rate in the
// order of Config.Rates and changes every key without limits of its own;
// Config reports them; bad calls change nothing.
func TestDefaultLimitsPerRate(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l := mustNew(t, rateCfg(alg, twoRates))
			if err := l.SetLimits("vip", 5, 100); err != nil {
				t.Fatal(err)
			}
			if err := l.SetDefaultLimits(1, 10); err != nil {
				t.Fatal(err)
			}
			if got := l.Config().Rates; !slices.Equal(got, []Rate{{1, time.Second}, {10, time.Minute}}) {
				t.Fatalf("Config().Rates = %v", got)
			}
			runRateSteps(t, l, "k", []rstep{{0, 1, true, 0, 1, w1s, 0}, {0, 1, false, 0, 1, w1s, anyRetry}, {0, 2, false, 0, 1, w1s, Never}})
			runRateSteps(t, l, "vip", []rstep{{0, 5, true, 0, 5, w1s, 0}})
			if err := l.ClearLimit("vip"); err != nil {
				t.Fatal(err)
			}
			// vip used 5 in this second: over the default 1.
			runRateSteps(t, l, "vip", []rstep{{0.5, 1, false, 0, 1, w1s, anyRetry}})

			bad := []func() error{
				func() error { return l.SetDefaultLimits(1) },
				func() error { return l.SetDefaultLimits(1, 2, 3) },
				func() error { return l.SetDefaultLimit(1) },
				func() error { return l.SetDefaultLimits(-1, 2) },
				func() error { return l.SetDefaultLimits(1, MaxLimit+1) },
				func() error { return l.SetLimit("k", 1) },
				func() error { return l.SetLimits("k") },
				func() error { return l.SetLimits("new", 1, 2, 3) },
				func() error { return l.SetLimits("new", 1, -2) },
				func() error { return l.SetLimits("", 1, 2) },
			}
			if alg == SlidingLog {
				bad = append(bad, func() error { return l.SetLimits("new", 1, MaxSlidingLogLimit+1) })
			}
			for i, f := range bad {
				if err := f(); err == nil || !errors.Is(err, ErrInvalidConfig) && !errors.Is(err, ErrInvalidKey) {
					t.Fatalf("bad call %d: %v", i, err)
				}
			}
			if got := l.Config().Rates; !slices.Equal(got, []Rate{{1, time.Second}, {10, time.Minute}}) {
				t.Fatalf("after bad calls, Config().Rates = %v", got)
			}
			if r := l.Peek("new", at(0), 1); !r.Allowed || l.Len() != 2 {
				t.Fatalf("after bad calls: peek %+v, %d keys (a bad SetLimits stored a key?)", r, l.Len())
			}
		})
	}
}

func TestResetForgetsUsage(t *testing.T) {
	for _, alg := range allAlgorithms {
		l := mustNew(t, cfgFor(alg, 2, time.Minute, time.Second))
		l.AllowN("a", at(0), 2)
		l.SetLimit("b", 1)
		l.AllowN("b", at(0), 1)
		if err := l.Reset("a"); err != nil {
			t.Fatal(err)
		}
		l.Reset("b")
		l.Reset("missing")
		if r := l.AllowN("a", at(1), 2); !r.Allowed {
			t.Fatalf("%v: a after reset: %+v", alg, r)
		}
		if r := l.AllowN("b", at(1), 1); !r.Allowed || r.Limit != 1 {
			t.Fatalf("%v: b after reset kept its own limit: %+v", alg, r)
		}
	}
}

// TestResetForgetsEveryRate: Reset forgets every rate's usage and keeps a key's own
// limits.
func TestResetForgetsEveryRate(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l := mustNew(t, rateCfg(alg, twoRates))
			for i, n := range []int{3, 3, 3, 1} {
				if r := l.AllowN("k", at(1.1*float64(i)), n); !r.Allowed {
					t.Fatalf("%d at %v s: %+v", n, 1.1*float64(i), r)
				}
			}
			if r := l.AllowN("k", at(3.5), 1); r.Allowed {
				t.Fatalf("over both rates: %+v", r)
			}
			if err := l.Reset("k"); err != nil {
				t.Fatal(err)
			}
			runRateSteps(t, l, "k", []rstep{{3.5, 3, true, 0, 3, w1s, 0}})
			if err := l.SetLimits("k", 2, 6); err != nil {
				t.Fatal(err)
			}
			runRateSteps(t, l, "k", []rstep{{5, 2, true, 0, 2, w1s, 0}, {6.1, 2, false, 1, 6, w1m, anyRetry}})
			if err := l.Reset("k"); err != nil {
				t.Fatal(err)
			}
			runRateSteps(t, l, "k", []rstep{{5, 3, false, 2, 2, w1s, Never}, {5, 2, true, 0, 2, w1s, 0}}) // stale: decided at 6.1 s
			// Reset does not move time back: a stale call is decided at
			// the key's latest instant.
			if err := l.Reset("k"); err != nil {
				t.Fatal(err)
			}
			runRateSteps(t, l, "k", []rstep{{1, 2, true, 0, 2, w1s, 0}, {1, 1, false, 0, 2, w1s, anyRetry}})
			if r := l.AllowN("k", at(1), 1); !at(1).Add(r.RetryAfter).After(at(6.1)) {
				t.Fatalf("stale call after Reset: %+v, decided before the key's latest instant", r)
			}
		})
	}
}
