package mwengine

import "sync"

// gateStripes is the number of read locks decisions spread over.
const gateStripes = 16

// gate is a reader-writer lock striped for readers: a decision read-locks
// one stripe (its Scratch's, which sync.Pool mostly hands back to the same
// processor, so decisions on different cores touch different cache lines),
// and the writer locks them all. One sync.RWMutex would make every
// decision of every core write its one reader count.
type gate struct {
	stripes [gateStripes]struct {
		sync.RWMutex
		_ [64]byte // keeps neighbouring mutexes off one cache line
	}
}

// rlock read-locks stripe i (mod gateStripes) and returns it for RUnlock.
func (g *gate) rlock(i uint32) *sync.RWMutex {
	m := &g.stripes[i%gateStripes].RWMutex
	m.RLock()
	return m
}

// lock write-locks every stripe: it returns once no decision holds a read
// lock, and holds new ones off until unlock.
func (g *gate) lock() {
	for i := range g.stripes {
		g.stripes[i].Lock()
	}
}

// unlock releases what lock took.
func (g *gate) unlock() {
	for i := range g.stripes {
		g.stripes[i].Unlock()
	}
}
