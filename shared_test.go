package shardlimit

import (
	"errors"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit/internal/shared"
)

// Tests of the sync state a limiter keeps for package sync, without a
// store: the test plays the reconciler.

func newSharedT(t *testing.T, cfg Config) (Limiter, shared.Table) {
	t.Helper()
	cfg.JanitorInterval = -1
	tab, err := shared.NewTable(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := tab.(Limiter)
	t.Cleanup(func() { l.Close() })
	return l, tab
}

func collectAll(tab shared.Table) []shared.Flush {
	var out []shared.Flush
	for i := range tab.Shards() {
		out = tab.Collect(i, out)
	}
	return out
}

func TestSharedRemoteCountsInDecisions(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingCounter, SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			l, tab := newSharedT(t, Config{Algorithm: alg, Limit: 10, Window: 10 * time.Second})
			size, m := tab.Buckets()
			wantM := map[Algorithm]int{FixedWindow: 1, SlidingCounter: 11, SlidingLog: 11}[alg]
			if m != wantM || size != int64(10*time.Second)/int64(max(1, m-1)) {
				t.Fatalf("buckets %d of %d ns", m, size)
			}
			runSteps(t, l, "k", countdown(1, 3, 7))
			fl := collectAll(tab)
			if len(fl) != 1 || fl[0].Key != "k" {
				t.Fatalf("collect %+v", fl)
			}
			f := fl[0]
			if got := f.Deltas[len(f.Deltas)-1]; got != 3 || f.Sent[len(f.Sent)-1] != 3 {
				t.Fatalf("deltas %v sent %v", f.Deltas, f.Sent)
			}
			if again := collectAll(tab); len(again) != 0 {
				t.Fatalf("a second collect without decisions returned %+v", again)
			}
			// The store says 8 units in the bucket: 5 from other nodes.
			totals := make([]int64, len(f.Deltas))
			totals[len(totals)-1] = 8
			tab.Apply(&f, totals)
			runSteps(t, l, "k", []step{{1, 1, true, 1, 0}, {1, 1, true, 0, 0}, {1, 1, false, 0, dontCare}})
			// Those 2 are collected with the sent total as the heal floor.
			fl = collectAll(tab)
			if d := fl[0].Deltas[len(fl[0].Deltas)-1]; d != 2 || fl[0].Sent[len(fl[0].Sent)-1] != 5 {
				t.Fatalf("second flush %+v", fl[0])
			}
			// The flush provably failed: restored, collected again.
			tab.Restore(&fl[0])
			fl = collectAll(tab)
			if len(fl) != 1 || fl[0].Deltas[len(fl[0].Deltas)-1] != 2 {
				t.Fatalf("after restore %+v", fl)
			}
			// Remote units age out with their bucket.
			if r := l.AllowN("k", at(12), 1); !r.Allowed {
				t.Fatalf("remote units outlived their window: %+v", r)
			}
		})
	}
}

func TestSharedDroppedWhenBucketEnds(t *testing.T) {
	l, tab := newSharedT(t, Config{Algorithm: FixedWindow, Limit: 10, Window: time.Second})
	l.AllowN("k", at(0), 4)
	l.AllowN("k", at(1), 1) // the first window ended unsent
	dropped, dirty := tab.SyncStats()
	if dropped != 4 || dirty != 1 {
		t.Fatalf("dropped %d dirty %d", dropped, dirty)
	}
}

func TestSharedGCRAIsExactOnly(t *testing.T) {
	_, err := shared.NewTable(Config{Algorithm: GCRA, Limit: 1, Window: time.Second})
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatal(err)
	}
	if _, err := shared.NewTable("nope"); !errors.Is(err, ErrInvalidConfig) {
		t.Fatal(err)
	}
}

// TestSharedSlidingLogRetryOffGrid: the newest local unit of a shared log
// stops counting W after its rounded-up stamp, and the RetryAfter a peek
// reports with remote units waiting lands on that instant.
func TestSharedSlidingLogRetryOffGrid(t *testing.T) {
	l, tab := newSharedT(t, Config{Algorithm: SlidingLog, Limit: 4, Window: time.Minute, Buckets: 60})
	s := at(0.5).Add(37) // stamped 63 ns later, on the 100 ns grid
	l.AllowN("k", s, 1)
	fl := collectAll(tab)
	totals := make([]int64, len(fl[0].Deltas))
	totals[len(totals)-1] = 6 // 5 remote units in bucket 0 = [0 s, 1 s)
	tab.Apply(&fl[0], totals)
	r := l.Peek("k", at(5), 1)
	if r.Allowed {
		t.Fatalf("%+v", r)
	}
	// Bucket 0's 5 remote units fade over [60 s, 61 s): at the stamp plus
	// W, 60.5 s plus 100 ns, they weigh ceil(5 * 0.4999999) = 3, so 3 + 1
	// fit the limit of 4 once the local unit is gone, and not a nanosecond
	// before.
	want := at(60.5).Add(100).Sub(at(5))
	if r.RetryAfter != want {
		t.Fatalf("retry after %v, want %v", r.RetryAfter, want)
	}
	if p := l.Peek("k", at(5).Add(r.RetryAfter-1), 1); p.Allowed {
		t.Fatalf("admitted before retry-after %v", r.RetryAfter)
	}
	if p := l.Peek("k", at(5).Add(r.RetryAfter), 1); !p.Allowed {
		t.Fatalf("not admitted at retry-after %v", r.RetryAfter)
	}
}

func TestSharedSlidingLogRetryWithRemote(t *testing.T) {
	l, tab := newSharedT(t, Config{Algorithm: SlidingLog, Limit: 4, Window: 10 * time.Second})
	l.AllowN("k", at(0.5), 1)
	fl := collectAll(tab)
	totals := make([]int64, len(fl[0].Deltas))
	totals[len(totals)-1] = 4 // 3 remote units in bucket 0
	tab.Apply(&fl[0], totals)
	r := l.AllowN("k", at(5), 1)
	if r.Allowed || r.Remaining != 0 {
		t.Fatalf("%+v", r)
	}
	// Bucket 0 straddles from t=10 and its 3 remote units fade over
	// [10, 11); the local unit of 0.5 counts until 10.5. One unit fits once
	// 1 + ceil(3*(1-f)) + 1 <= 4, f the elapsed share of the bucket: from
	// f = 1/3, t = 10.333333334 (rounded up to the nanosecond).
	if p := l.Peek("k", at(5).Add(r.RetryAfter), 1); !p.Allowed {
		t.Fatalf("not admitted at retry-after %v", r.RetryAfter)
	}
	if p := l.Peek("k", at(5).Add(r.RetryAfter-1), 1); p.Allowed {
		t.Fatalf("admitted before retry-after %v", r.RetryAfter)
	}
	if r.RetryAfter != 5333333334*time.Nanosecond {
		t.Fatalf("retry after %v, want 5.333333334s", r.RetryAfter)
	}
}
