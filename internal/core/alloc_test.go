//go:build !race

package core

import (
	"fmt"
	"testing"
	"time"
)

// Allocation counts are deterministic, so they are asserted here (the race
// detector allocates, hence the build tag).

// The public methods' guard, TestNoAllocationsOnHotPath, is the root
// package's: it runs this package's decision path through them.
// TestDecisionsDoNotAllocate guards this package's own, with several rates.

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

// TestDecisionsDoNotAllocate: with one rate and with two, no decision on
// a stored key allocates, denied ones and peeks included, nor does window
// rotation.
func TestDecisionsDoNotAllocate(t *testing.T) {
	for _, nrates := range []int{1, 2} {
		for _, alg := range allAlgorithms {
			t.Run(fmt.Sprint(nrates, "_rates/", alg), func(t *testing.T) {
				clock := NewManualClock(at(0))
				cfg := rateCfg(alg, []Rate{{500, time.Second}, {1000, time.Minute}}[:nrates])
				cfg.Clock = clock
				l := mustNew(t, cfg)
				key, bkey := "192.0.2.1", []byte("192.0.2.1")
				l.AllowN(key, at(0), 1)
				l.AllowN("denied", at(0), 500)
				now := at(1)
				cases := map[string]func(){
					"AllowN":          func() { l.AllowN(key, now, 1) },
					"AllowN(3)":       func() { l.AllowN(key, now, 3) },
					"AllowBytesN":     func() { l.AllowBytesN(bkey, now, 1) },
					"Allow":           func() { l.Allow(key) },
					"AllowAt":         func() { l.AllowAt(key, now) },
					"AllowBytesAt":    func() { l.AllowBytesAt(bkey, now) },
					"Peek":            func() { l.Peek(key, now, 1) },
					"AllowN denied":   func() { l.AllowN("denied", now, 1) },
					"AllowAt denied":  func() { l.AllowAt("denied", now) },
					"AllowN(0) new":   func() { l.AllowN("missing", now, 0) },
					"above the limit": func() { l.AllowN(key, now, 501) },
				}
				for name, f := range cases {
					for range 3000 { // fill rings and buckets first
						f()
					}
					if n := testing.AllocsPerRun(1000, f); n != 0 {
						t.Errorf("%s: %v allocations per call, want 0", name, n)
					}
				}
				rot := mustNew(t, rateCfg(alg, []Rate{{3, 100 * time.Millisecond}, {5, time.Second}}[:nrates]))
				w := at(0)
				rot.AllowN("r", w, 3)
				if n := testing.AllocsPerRun(1000, func() {
					w = w.Add(time.Second)
					rot.AllowN("r", w, 3)
				}); n != 0 {
					t.Errorf("window rotation: %v allocations per call, want 0", n)
				}
			})
		}
	}
}
