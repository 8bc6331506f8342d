//go:build !race

package shardlimit

import (
	"testing"
	"time"
)

// Allocation counts are deterministic, so they are asserted here (the race
// detector allocates, hence the build tag).

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

func TestSystemClockDoesNotAllocate(t *testing.T) {
	c := SystemClock()
	if n := testing.AllocsPerRun(100, func() { c.Now() }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

func TestSharedHotPathDoesNotAllocate(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingCounter, SlidingLog} {
		l, tab := newSharedT(t, Config{Algorithm: alg, Limit: 1 << 20, Window: time.Minute})
		l.AllowN("k", at(0), 1)
		collectAll(tab) // the dirty list keeps its capacity
		if n := testing.AllocsPerRun(1000, func() { l.AllowN("k", at(1), 1) }); n != 0 {
			t.Errorf("%v: %v allocations per call, want 0", alg, n)
		}
	}
}
