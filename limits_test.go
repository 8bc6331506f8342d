package shardlimit

// Tests of documented bounds and costs, found by review.

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// Policy S2 under-counts the straddling bucket when its units arrived at its
// end, so a client that bursts at the end of a bucket and again at the end
// of the window gets up to 2*limit-1 into one window: the documented worst
// case, never more.
func TestSlidingCounterBurstAtBucketEdges(t *testing.T) {
	l := mustNew(t, Config{Algorithm: SlidingCounter, Limit: 10, Window: 10 * time.Second, Buckets: 10})
	n := 0
	for _, sec := range []float64{0.999, 10.95} { // both inside [0.999, 10.999)
		for range 20 {
			if l.AllowN("k", at(sec), 1).Allowed {
				n++
			}
		}
	}
	if n != 19 {
		t.Errorf("%d admitted within one window of 10 s; the documented worst case is 2*10-1", n)
	}
}

// A small sliding log table stays small: ring pages start at 1 KiB per
// shard, not 256 KiB (the middleware builds one limiter per rule).
func TestSlidingLogSmallTableMemory(t *testing.T) {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	l := mustNew(t, Config{Algorithm: SlidingLog, Limit: 10, Window: time.Minute, Shards: 64})
	for i := range 256 {
		l.AllowN(fmt.Sprint("k", i), at(0), 1)
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	perKey := (int64(m1.HeapAlloc) - int64(m0.HeapAlloc)) / int64(l.Len())
	if perKey > 1024 {
		t.Errorf("%d keys holding one unit each cost %d B/key", l.Len(), perKey)
	}
	runtime.KeepAlive(l)
}

// GCRA keeps a key's usage when its limit is lowered and raised again, as
// long as the debt at the lowered limit fits maxDebt (20 years); the README
// documents the cap.
func TestGCRALowerRaiseKeepsUsage(t *testing.T) {
	l := mustNew(t, Config{Algorithm: GCRA, Limit: 1_000_000, Window: time.Hour})
	if r := l.AllowN("k", at(0), 1_000_000); !r.Allowed {
		t.Fatal(r)
	}
	// 1,000 is the smallest limit whose debt (1,000 hours) fits.
	if err := l.SetLimit("k", 1000); err != nil {
		t.Fatal(err)
	}
	if err := l.SetLimit("k", 1_000_000); err != nil {
		t.Fatal(err)
	}
	if r := l.Peek("k", at(1), 0); r.Remaining > 1000 {
		t.Errorf("1 s after spending the whole limit, remaining %d of 1,000,000", r.Remaining)
	}
	// Lowered to 1, the debt would be 114 years: it is capped at 20, so
	// raising the limit again restores 20 years' worth at the old rate.
	l.SetLimit("k", 1)
	l.SetLimit("k", 1_000_000)
	if r := l.Peek("k", at(1), 0); r.Remaining < 800_000 || r.Remaining > 830_000 {
		t.Errorf("capped debt: remaining %d", r.Remaining)
	}
}
