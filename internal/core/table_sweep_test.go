package core

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Sweeps of the key table racing writers: a writer that grows the table,
// an algorithm that pauses mid-judgement.

// TestTableSweepWithConcurrentWriter sweeps while another goroutine admits
// new keys, so the table grows (moving keys) between a sweep's chunks and
// evictions move keys back under it. No admitted unit may be lost, and
// once the writer is done one more sweep removes every idle key.
func TestTableSweepWithConcurrentWriter(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			const limit = 5
			l := mustNew(t, Config{Algorithm: alg, Limit: limit, Window: time.Minute, Shards: 1, Buckets: 6})
			p := probe(l)
			p.setSeed(tableSeed)
			idle := keyPool("idle", 800) // admitted long ago: idle at now
			for _, k := range idle[:300] {
				l.AllowN(k, at(0), 1)
			}
			now := at(600)
			keys := keyPool("new", 1500)
			want := make(map[string]int, len(keys))
			done := make(chan struct{})
			var failures []string
			go func() {
				// New keys admitted now, interleaved with idle ones for the
				// sweeps to evict all over the table while it grows.
				defer close(done)
				for i, k := range keys {
					n := 1 + i%3
					if r := l.AllowN(k, now, n); !r.Allowed || r.Remaining != limit-n {
						failures = append(failures, fmt.Sprintf("new key %.20q: %+v", k, r))
					}
					want[k] = n
					if i%4 == 0 { // and a key admitted earlier, which may have moved
						k2 := keys[i/2]
						if r := l.AllowN(k2, now, 1); !r.Allowed || r.Remaining != limit-want[k2]-1 {
							failures = append(failures, fmt.Sprintf("key %.20q with %d used: %+v", k2, want[k2], r))
						}
						want[k2]++
					}
					if next := 300 + i/2; i%2 == 0 && next < len(idle) {
						// Stored with no usage: idle. (A key admitted at
						// at(0) now would be decided at the latest
						// eviction's instant, as keys evicted then might
						// have been.)
						if err := l.SetLimit(idle[next], limit); err != nil {
							failures = append(failures, err.Error())
						}
						l.ClearLimit(idle[next])
					}
				}
			}()
			sweeps, swept := 0, 0
		loop:
			for {
				select {
				case <-done:
					break loop
				default:
				}
				swept += l.Sweep(now)
				sweeps++
				runtime.Gosched()
			}
			for _, f := range failures[:min(len(failures), 5)] {
				t.Error(f)
			}
			swept += l.Sweep(now)
			if swept != len(idle) || l.Len() != len(want) {
				t.Fatalf("%d sweeps evicted %d keys of %d idle; %d keys stored, want %d", sweeps+1, swept, len(idle), l.Len(), len(want))
			}
			stored := p.check(t, 0)
			for k, n := range want {
				if _, ok := stored[k]; !ok {
					t.Fatalf("admitted key %.20q was evicted", k)
				}
				if r := l.Peek(k, now, 0); r.Remaining != limit-n {
					t.Fatalf("key %.20q admitted %d units: %+v", k, n, r)
				}
			}
		})
	}
}

// pausingAlg wraps a table's algorithm to pause a sweep, holding the
// shard's lock, at the start of each chunk until a writer has run: the
// writer queues on the lock and, having waited over 1 ms, turns the mutex to
// starvation mode, in which the sweep's next unlock hands the lock to it.
// So the writer runs between two of the sweep's chunks.
type pausingAlg[E any] struct {
	algorithm[E]
	paused chan struct{} // receives when the sweep first pauses
	writer atomic.Bool   // the writer has run
	chunk  int           // the chunk of the latest idle call, -1 before any
	pauses int
	tables []*slotRec[E] // the tables the sweep saw, under the lock
	lens   []int         // and their lengths
}

func (a *pausingAlg[E]) idle(s *shard[E], rec *E, slot uint32, t int64) bool {
	if p := &s.recs[0]; len(a.tables) == 0 || a.tables[len(a.tables)-1] != p {
		a.tables = append(a.tables, p)
		a.lens = append(a.lens, len(s.recs))
	}
	if c := int(slot) / sweepChunk; c != a.chunk {
		a.chunk = c
		if !a.writer.Load() && a.pauses < 4 {
			if a.pauses == 0 {
				a.paused <- struct{}{}
			}
			a.pauses++
			time.Sleep(3 * time.Millisecond)
		}
	}
	return a.algorithm.idle(s, rec, slot, t)
}

// TestTableSweepWhileTableGrows makes the table grow (rehash, moving every
// key) between two chunks of a sweep: idle keys wait in its third chunk and
// later ones, the table is one insert away from growth, and a writer adds a
// key while the sweep pauses (see pausingAlg). The sweep must then evict
// only idle keys of the table as it is, and no admitted unit may be lost.
func TestTableSweepWhileTableGrows(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			cfg := Config{Algorithm: alg, Limit: 5, Window: time.Minute, Shards: 1, Buckets: 6}
			for round := range 3 {
				var grew bool
				switch l := mustNew(t, cfg).(type) {
				case *FixedLimiter:
					grew = sweepWhileGrowing(t, l, &l.limiter)
				case *LogLimiter:
					grew = sweepWhileGrowing(t, l, &l.limiter)
				case *CounterLimiter:
					grew = sweepWhileGrowing(t, l, &l.limiter)
				case *GCRALimiter:
					grew = sweepWhileGrowing(t, l, &l.limiter)
				}
				if grew {
					return
				}
				t.Logf("round %d: the writer did not run between the sweep's chunks", round)
			}
		})
	}
}

// sweepWhileGrowing runs one sweep of l (whose table is lim's) with a
// writer that grows the table, checks that nothing admitted was lost, and
// reports whether the table grew between the sweep's chunks.
func sweepWhileGrowing[E any](t *testing.T, l Limiter, lim *limiter[E]) bool {
	t.Helper()
	const limit = 5
	tab := &lim.tab
	setTableSeed(tab, tableSeed)
	s := &tab.shards[0]
	now := at(600)
	want := map[string]int{}
	busy := 0
	admit := func() error { // a new key with units now
		k := fmt.Sprint("busy", busy, strings.Repeat("~", busy%3*10))
		n := 1 + busy%3
		busy++
		want[k] = n
		if r := l.AllowN(k, now, n); !r.Allowed {
			return fmt.Errorf("%.20q: %+v", k, r)
		}
		return nil
	}
	size := func() (n, used int) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.recs), s.live
	}
	for n, _ := size(); n <= 3*sweepChunk; n, _ = size() {
		if err := admit(); err != nil {
			t.Fatal(err)
		}
	}
	// Idle keys, only in the third chunk and later: the first two chunks,
	// before the writer runs, evict nothing, so its insert still finds the
	// table at its limit.
	idle := map[string]bool{}
	for i := range 600 {
		k := fmt.Sprint("idle", i)
		l.AllowN(k, at(0), 1)
		idle[k] = true
	}
	s.mu.Lock()
	var low []string
	for k := range idle {
		if slot, ok := find(s, tab.hash(k), k); ok && slot < 2*sweepChunk {
			low = append(low, k)
		}
	}
	s.mu.Unlock()
	slices.Sort(low)
	for _, k := range low {
		l.Reset(k)
		delete(idle, k)
	}
	for n, used := size(); 16*(used+1) <= 13*n; n, used = size() {
		if err := admit(); err != nil {
			t.Fatal(err)
		}
	}

	pa := &pausingAlg[E]{algorithm: tab.alg, paused: make(chan struct{}, 1), chunk: -1}
	tab.alg = pa
	defer func() { tab.alg = pa.algorithm }()
	done := make(chan struct{})
	var werr error
	go func() {
		defer close(done)
		<-pa.paused
		werr = admit() // queues on the lock held by the paused sweep; grows the table
		pa.writer.Store(true)
	}()
	swept := l.Sweep(now)
	<-done
	if werr != nil {
		t.Fatal(werr)
	}
	tab.alg = pa.algorithm
	grew := len(pa.tables) > 1 // the writer rehashed the table mid-sweep
	t.Logf("the sweep paused %d times, saw tables of %v positions", pa.pauses, pa.lens)

	swept += l.Sweep(now)
	if swept != len(idle) || l.Len() != len(want) {
		t.Fatalf("sweeps evicted %d keys of %d idle; %d keys stored, want %d (table lengths seen by the sweep %v)",
			swept, len(idle), l.Len(), len(want), pa.lens)
	}
	stored := probe(l).check(t, 0)
	for k, n := range want {
		if _, ok := stored[k]; !ok {
			t.Fatalf("admitted key %.20q was evicted (table lengths seen by the sweep %v)", k, pa.lens)
		}
		if r := l.Peek(k, now, 0); r.Remaining != limit-n {
			t.Fatalf("key %.20q admitted %d units: %+v", k, n, r)
		}
	}
	return grew
}
