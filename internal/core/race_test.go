package core

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Concurrency tests, meant for `go test -race`.

// parallel runs f(g) on g goroutines released together and waits for all.
func parallel(g int, f func(g int)) {
	var start, done sync.WaitGroup
	start.Add(1)
	for i := range g {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			f(i)
		}()
	}
	start.Done()
	done.Wait()
}

func TestConcurrentSameKey(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clock := NewManualClock(at(1))
			cfg := cfgFor(alg, 100, time.Minute, time.Second)
			cfg.Clock = clock
			l := mustNew(t, cfg)

			var mu sync.Mutex
			var remaining []int
			parallel(64, func(int) {
				for range 10 {
					r := l.AllowN("hot", clock.Now(), 1)
					if r.Allowed {
						mu.Lock()
						remaining = append(remaining, r.Remaining)
						mu.Unlock()
					}
				}
			})
			slices.Sort(remaining)
			if len(remaining) != 100 {
				t.Fatalf("admitted %d of 640, want 100", len(remaining))
			}
			for i, r := range remaining {
				if r != i {
					t.Fatalf("remaining values %v, want each of 0..99 once", remaining)
				}
			}
			if st := l.Stats(); st.Allowed != 100 || st.Denied != 540 {
				t.Fatalf("stats %+v", st)
			}

			count := make(chan struct{}, 640)
			parallel(64, func(int) {
				for range 10 {
					if l.AllowN("hot2", clock.Now(), 3).Allowed {
						count <- struct{}{}
					}
				}
			})
			if len(count) != 33 {
				t.Fatalf("AllowN(3) admitted %d times, want 33", len(count))
			}
			if r := l.AllowN("hot2", clock.Now(), 1); !r.Allowed || r.Remaining != 0 {
				t.Fatalf("last unit: %+v", r)
			}
			if l.Allow("hot2") {
				t.Fatal("admitted past the limit")
			}

			cfg.Limit = 3
			l3 := mustNew(t, cfg)
			ok := make(chan bool, 10)
			parallel(10, func(int) { ok <- l3.Allow("few") })
			close(ok)
			n := 0
			for v := range ok {
				if v {
					n++
				}
			}
			if n != 3 {
				t.Fatalf("limit 3 admitted %d of 10 concurrent calls", n)
			}
		})
	}
}

// admission is one admitted decision recorded by a worker.
type admission struct {
	key string
	at  int64
	n   int
}

func TestConcurrentChaos(t *testing.T) {
	// 32 goroutines on random keys with concurrent SetLimit (5..10), peeks,
	// key counts and a janitor ticking every millisecond, while an injected
	// clock advances 10 ms per phase. Phases keep every key's time
	// monotone, so the recorded admissions can be checked exactly.
	const (
		workers = 32
		phases  = 200
		ops     = 16
		window  = time.Second
	)
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clock := NewManualClock(at(0))
			l, err := New(Config{Algorithm: alg, Limit: 10, Window: window, Buckets: 10,
				JanitorInterval: time.Millisecond, Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			logs := make([][]admission, workers)
			for p := range phases {
				now := clock.Advance(10 * time.Millisecond)
				parallel(workers, func(g int) {
					rng := rand.New(rand.NewPCG(uint64(p), uint64(g)))
					for range ops {
						key := fmt.Sprint("k", rng.IntN(200))
						switch rng.IntN(10) {
						case 0:
							if err := l.SetLimit(key, 5+rng.IntN(6)); err != nil {
								t.Error(err)
							}
						case 1:
							checkResultSane(t, l.Peek(key, now, 1))
							l.Len()
						default:
							n := 1 + rng.IntN(2)
							r := l.AllowN(key, now, n)
							checkResultSane(t, r)
							if r.Allowed {
								logs[g] = append(logs[g], admission{key, now.UnixNano(), n})
							}
						}
					}
				})
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			byKey := map[string][]admission{}
			total := 0
			for _, lg := range logs {
				for _, a := range lg {
					byKey[a.key] = append(byKey[a.key], a)
					total += a.n
				}
			}
			if total == 0 {
				t.Fatal("nothing admitted")
			}
			w := int64(window)
			for key, as := range byKey {
				slices.SortFunc(as, func(a, b admission) int { return cmp.Compare(a.at, b.at) })
				for i, first := range as {
					// Units admitted in [first.at, first.at+W), and in the
					// window-aligned (fixed) or bucket-aligned (counter)
					// window that starts where first's window or bucket does.
					start := first.at
					switch alg {
					case FixedWindow:
						start -= start % w
					case SlidingCounter:
						start -= start % (w / 10)
					}
					sum := 0
					for _, a := range as[i:] {
						if a.at < start+w {
							sum += a.n
						}
					}
					bound := 10
					if alg == GCRA {
						bound = 20 // burst plus one window of refill
					}
					if sum > bound {
						t.Fatalf("key %s: %d units admitted in [%d, %d+W), bound %d", key, sum, start, start, bound)
					}
				}
			}
		})
	}
}

func TestConcurrentDistinctKeysAndSweeps(t *testing.T) {
	// Inserts racing sweeps, rebuilds and ring compaction: every key keeps
	// its own count. Worker g works in rounds 10 s apart; the sweeper
	// sweeps at the slowest worker's round, so only finished rounds' keys
	// (idle after 1 s) are evicted. A worker starts round r only once a
	// sweep at round r-1 has finished, so sweeps do run among the inserts
	// however the goroutines are scheduled (without that gate the workers
	// could finish before the sweeper's first sweep, 1 run in 16).
	l := mustNew(t, Config{Algorithm: SlidingLog, Limit: 3, Window: time.Second, Shards: 2})
	const workers = 8
	var rounds [workers]atomic.Int64
	const nrounds = 20
	var sweptRound [nrounds]chan struct{} // closed once a sweep at that round finished
	for i := range sweptRound {
		sweptRound[i] = make(chan struct{})
	}
	done := make(chan struct{})
	swept := make(chan int)
	go func() {
		n, closed := 0, int64(0) // rounds whose channel is closed
		for {
			select {
			case <-done:
				swept <- n
				return
			default:
				slowest := rounds[0].Load()
				for i := range rounds {
					slowest = min(slowest, rounds[i].Load())
				}
				n += l.Sweep(at(float64(slowest * 10)))
				for ; closed <= slowest && closed < nrounds; closed++ {
					close(sweptRound[closed])
				}
			}
		}
	}()
	parallel(workers, func(g int) {
		for round := range int64(nrounds) {
			if round > 0 {
				select {
				case <-sweptRound[round-1]:
				case <-time.After(10 * time.Second):
					t.Errorf("worker %d: no sweep at round %d within 10s", g, round-1)
					return
				}
			}
			rounds[g].Store(round)
			sec := float64(round * 10)
			for i := range 200 {
				key := fmt.Sprint(g, "-", round, "-", i)
				for j := range 4 {
					r := l.AllowN(key, at(sec), 1)
					if r.Allowed != (j < 3) {
						t.Errorf("key %s call %d: %+v", key, j, r)
						return
					}
				}
			}
		}
	})
	close(done)
	if n := <-swept; n == 0 {
		t.Fatal("the sweeper evicted nothing: the test did not race sweeps against inserts")
	}
}

// A new key refused by a full table reports the default limit, which
// SetDefaultLimit changes under the shard's lock: decideKey read it after
// unlocking, a data race under -race.
func TestFullTableErrorDoesNotRaceSetDefaultLimit(t *testing.T) {
	l := mustNew(t, Config{Algorithm: FixedWindow, Limit: 5, Window: time.Minute, Shards: 1, MaxKeys: 1})
	l.AllowN("resident", at(0), 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 2000 {
			l.SetDefaultLimit(5 + i%2)
		}
	}()
	for i := range 2000 {
		if r := l.AllowN(fmt.Sprint("new", i), at(1), 1); !errors.Is(r.Err, ErrTooManyKeys) || r.Limit < 5 {
			t.Fatalf("%+v", r)
		}
	}
	<-done
}
