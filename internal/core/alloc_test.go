//go:build !race

package core

import (
	"testing"
	"time"
)

// Allocation counts are deterministic, so they are asserted here (the race
// detector allocates, hence the build tag).

// The public methods' guard, TestNoAllocationsOnHotPath, is the root
// package's: it runs this package's decision path through them.

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
