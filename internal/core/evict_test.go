package core

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fullKeys is the MaxKeys of the full-table benchmarks: the middleware's
// default cap (httplimit.DefaultMaxKeys).
const fullKeys = 1 << 20

// numKey writes key i, "n" and i in decimal, into buf and returns it.
func numKey(buf *[24]byte, i int) []byte {
	return strconv.AppendUint(append(buf[:0], 'n'), uint64(i), 10)
}

// BenchmarkInsert times one call per op with the table around a million
// keys, for each algorithm:
//
//   - uncapped: a new key in a table without MaxKeys (it keeps growing);
//   - stored: a stored key of the million;
//   - EvictLeastRecent/busy: a new key in a full table (MaxKeys 2^20) in
//     which no key is idle (one fixed instant), so every insert evicts the
//     least recently used of a sample, the policy's worst case;
//   - RejectNewKeys/mostlyidle: a new key in a full table in which about a
//     quarter of the keys are busy (instants advance by W per 2^18 calls:
//     the keys of the last 2^18 calls are busy), so every insert evicts an
//     idle key (a sample of 16 keys all busy is a chance of 4^-16);
//   - RejectNewKeys/busy: a new key in a full table with no idle key,
//     denied with ErrTooManyKeys: the cost of a flood of new keys that a
//     full table turns away.
//
// Tables are filled before the timer with 1.25 times MaxKeys keys, so
// that every shard is full. It skips under the race detector, which makes
// that filling take minutes.
func BenchmarkInsert(b *testing.B) {
	if raceEnabled {
		b.Skip("1.25 million keys under the race detector")
	}
	const window = time.Minute
	step := int64(window) / (fullKeys / 4)
	type scenario struct {
		name    string
		cap     bool
		policy  FullPolicy
		advance bool // instants advance by step per call
		stored  bool // time stored keys, not new ones
		denied  bool // every timed call is denied with ErrTooManyKeys
	}
	for _, alg := range allAlgorithms {
		for _, sc := range []scenario{
			{name: "uncapped"},
			{name: "stored", stored: true},
			{name: "EvictLeastRecent/busy", cap: true, policy: EvictLeastRecent},
			{name: "RejectNewKeys/mostlyidle", cap: true, policy: RejectNewKeys, advance: true},
			{name: "RejectNewKeys/busy", cap: true, policy: RejectNewKeys, denied: true},
		} {
			b.Run(alg.String()+"/"+sc.name, func(b *testing.B) {
				cfg := Config{Algorithm: alg, Limit: 1000, Window: window, JanitorInterval: -1}
				if sc.cap {
					cfg.MaxKeys, cfg.WhenFull = fullKeys, sc.policy
				}
				l := mustNew(b, cfg)
				base := int64(t0Unix) * 1e9
				instant := func(i int) time.Time {
					if sc.advance {
						return time.Unix(0, base+int64(i)*step)
					}
					return time.Unix(0, base)
				}
				var buf [24]byte
				fill := fullKeys + fullKeys/4
				if sc.stored {
					fill = fullKeys
				}
				for i := range fill {
					l.AllowBytesN(numKey(&buf, i), instant(i), 1)
				}
				if sc.cap && l.Len() != fullKeys {
					b.Fatalf("%d keys stored after filling, want %d", l.Len(), fullKeys)
				}
				i, bad := fill, 0
				b.ReportAllocs()
				cpu0 := cpuTime()
				for b.Loop() {
					if sc.stored {
						if !l.AllowBytesN(numKey(&buf, i%fullKeys), instant(i), 1).Allowed {
							bad++
						}
					} else {
						r := l.AllowBytesN(numKey(&buf, i), instant(i), 1)
						if sc.denied != errors.Is(r.Err, ErrTooManyKeys) || !sc.denied && !r.Allowed {
							bad++
						}
					}
					i++
				}
				b.StopTimer()
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
				b.ReportMetric(float64(bad)/float64(b.N), "unexpected/op")
				if bad > 0 && !sc.advance {
					b.Fatalf("%d of %d calls went the unexpected way", bad, b.N)
				}
			})
		}
	}
}

// countingAlg wraps a table's algorithm to count the keys makeRoom judges.
type countingAlg[E any] struct {
	algorithm[E]
	judged int
}

func (a *countingAlg[E]) idle(s *shard[E], rec *E, slot uint32, t int64) bool {
	a.judged++
	return a.algorithm.idle(s, rec, slot, t)
}

// fullTable returns a limiter of one shard holding maxKeys keys, admitted
// at t0 with a window of a minute.
func fullTable(t *testing.T, alg Algorithm, policy FullPolicy, maxKeys int) Limiter {
	t.Helper()
	l := mustNew(t, Config{Algorithm: alg, Limit: 10, Window: time.Minute, Shards: 1, MaxKeys: maxKeys, WhenFull: policy})
	p := probe(l)
	p.setSeed(tableSeed)
	var buf [24]byte
	for i := range maxKeys {
		if r := l.AllowBytesN(numKey(&buf, i), at(0), 1); !r.Allowed {
			t.Fatalf("filling: key %d: %+v", i, r)
		}
	}
	return l
}

// makeRoomWork returns, for the limiter's single shard, the positions
// makeRoom has read and a counter of the keys it judges from now on.
func makeRoomWork(l Limiter) (examined func() uint64, judged func() int) {
	switch l := l.(type) {
	case *FixedLimiter:
		return workOf(&l.tab)
	case *LogLimiter:
		return workOf(&l.tab)
	case *CounterLimiter:
		return workOf(&l.tab)
	case *GCRALimiter:
		return workOf(&l.tab)
	}
	panic(fmt.Sprintf("no table in %T", l))
}

func workOf[E any](tab *table[E]) (func() uint64, func() int) {
	c := &countingAlg[E]{algorithm: tab.alg}
	tab.alg = c
	s := &tab.shards[0]
	examined := func() uint64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.examined
	}
	judged := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return c.judged
	}
	return examined, judged
}

// A new key in a full table costs makeRoom at most sampleReach positions
// read and sampleSize keys judged, however large the table and whatever
// the keys' state: a table of 4,000 keys all busy (EvictLeastRecent evicts
// the least recent judged, RejectNewKeys denies) and all idle.
func TestMakeRoomWorkIsBounded(t *testing.T) {
	const maxKeys = 4000
	for _, alg := range allAlgorithms {
		for _, policy := range []FullPolicy{EvictLeastRecent, RejectNewKeys} {
			for _, idle := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/%s/idle=%v", alg, policyName(policy), idle), func(t *testing.T) {
					l := fullTable(t, alg, policy, maxKeys)
					examined, judged := makeRoomWork(l)
					now := at(0)
					if idle {
						now = at(600)
					}
					var buf [24]byte
					maxPos, maxJudged, evicted := uint64(0), 0, l.Stats().Evicted
					for i := range 2 * maxKeys {
						e0, j0 := examined(), judged()
						r := l.AllowBytesN(numKey(&buf, maxKeys+i), now, 1)
						e, j := examined()-e0, judged()-j0
						if e == 0 || j == 0 || e > sampleReach || j > sampleSize {
							t.Fatalf("new key %d: makeRoom read %d positions and judged %d keys, want 1 to %d and 1 to %d",
								i, e, j, sampleReach, sampleSize)
						}
						maxPos, maxJudged = max(maxPos, e), max(maxJudged, j)
						wantErr := policy == RejectNewKeys && !idle
						if errors.Is(r.Err, ErrTooManyKeys) != wantErr || !wantErr && !r.Allowed {
							t.Fatalf("new key %d: %+v", i, r)
						}
						if idle {
							now = now.Add(2 * time.Minute) // the keys stored so far stay idle
						}
					}
					if policy == EvictLeastRecent && !idle && maxJudged != sampleSize {
						t.Errorf("judged at most %d keys per new key among busy ones, want %d", maxJudged, sampleSize)
					}
					if got := l.Stats().Evicted - evicted; policy == RejectNewKeys && !idle && got != 0 || (policy == EvictLeastRecent || idle) && got != 2*maxKeys {
						t.Errorf("%d keys evicted for %d new keys", got, 2*maxKeys)
					}
					t.Logf("at most %d positions read and %d keys judged per new key", maxPos, maxJudged)
				})
			}
		}
	}
}

// The hand passes every stored key within ceil(live/sampleSize) +
// ceil(len/sampleReach) calls: under RejectNewKeys, the one idle key of a
// full table of busy keys is found by a new key within that many attempts,
// wherever it is. (A sample of 16 random positions per attempt found it
// after about live/16 attempts on average, with no bound: in 16 of these
// 80 tables it took more than this bound.)
func TestMakeRoomFindsTheOneIdleKey(t *testing.T) {
	const maxKeys = 512
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			for trial := range 20 {
				l := mustNew(t, Config{Algorithm: alg, Limit: 10, Window: time.Minute, Shards: 1, MaxKeys: maxKeys})
				p := probe(l)
				p.setSeed(tableSeed + uint64(trial))
				idleKey := fmt.Sprint("idle", trial)
				l.AllowN(idleKey, at(-120), 1) // idle from at(-60) on
				var buf [24]byte
				for i := range maxKeys - 1 {
					if r := l.AllowBytesN(numKey(&buf, i), at(0), 1); !r.Allowed {
						t.Fatalf("filling: key %d: %+v", i, r)
					}
				}
				n := len(p.check(t, 0))
				if n != maxKeys {
					t.Fatalf("%d keys stored, want %d", n, maxKeys)
				}
				bound := (maxKeys+sampleSize-1)/sampleSize + (tableLen(maxKeys)+sampleReach-1)/sampleReach
				attempts := 0
				for {
					attempts++
					r := l.AllowBytesN(numKey(&buf, maxKeys+attempts), at(0), 1)
					if r.Err == nil {
						break
					}
					if attempts > bound {
						t.Fatalf("trial %d: %d new keys denied with an idle key stored; bound %d", trial, attempts, bound)
					}
				}
				if _, ok := p.check(t, 0)[idleKey]; ok {
					t.Fatalf("trial %d: a new key was stored, the idle key was not evicted", trial)
				}
			}
		})
	}
}

// missProbe returns the mean number of positions a lookup of a key not in
// shard 0 of tab reads (from each position to the first empty one, over
// all positions), what it would be in a table of the same load with
// positions taken at random (Knuth's (1 + 1/(1-a)^2)/2 for linear
// probing), and the table's address.
func missProbe[E any](tab *table[E]) (mean, random float64, addr string) {
	s := &tab.shards[0]
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.recs)
	start := 0
	for s.recs[start].klen != emptySlot {
		start++
	}
	total, run := 0, 0
	for k := 1; k <= n; k++ {
		if s.recs[(start-k+n)%n].klen == emptySlot {
			run = 0
		} else {
			run++
		}
		total += run + 1
	}
	a := float64(s.live) / float64(n)
	return float64(total) / float64(n), (1 + 1/((1-a)*(1-a))) / 2, fmt.Sprintf("%p", &s.recs[0])
}

// The hand keeps the table's load even: evicting one key per sampleSize it
// passes while new keys land anywhere, no stretch of the table fills up,
// and a lookup of a new key reads no more positions than in a table of
// the same load filled at random, and the table is never rebuilt (keys
// removed leave no tombstones to clear). Here every stored key is idle at
// every new key, the case that most favours evicting at one place. (A hand
// that stopped after each key it evicted made lookups read 60 to 1,200
// positions on average, against 4 to 13 at random.)
func TestMakeRoomKeepsTheTableEven(t *testing.T) {
	const maxKeys = 4096
	for _, alg := range allAlgorithms {
		for _, policy := range []FullPolicy{EvictLeastRecent, RejectNewKeys} {
			t.Run(alg.String()+"/"+policyName(policy), func(t *testing.T) {
				l := mustNew(t, Config{Algorithm: alg, Limit: 10, Window: time.Minute, Shards: 1, MaxKeys: maxKeys, WhenFull: policy})
				probe(l).setSeed(tableSeed)
				var buf [24]byte
				now := at(0)
				worst, table := 0.0, ""
				for i := range 10 * maxKeys {
					if r := l.AllowBytesN(numKey(&buf, i), now, 1); !r.Allowed {
						t.Fatalf("new key %d: %+v", i, r)
					}
					now = now.Add(2 * time.Minute) // every stored key is idle
					if i%(maxKeys/2) != maxKeys/2-1 {
						continue
					}
					var mean, random float64
					var addr string
					switch l := l.(type) {
					case *FixedLimiter:
						mean, random, addr = missProbe(&l.tab)
					case *LogLimiter:
						mean, random, addr = missProbe(&l.tab)
					case *CounterLimiter:
						mean, random, addr = missProbe(&l.tab)
					case *GCRALimiter:
						mean, random, addr = missProbe(&l.tab)
					}
					if i >= maxKeys && table != "" && addr != table {
						t.Fatalf("after %d new keys: the full table was rebuilt", i+1)
					}
					if i >= maxKeys {
						table = addr
					}
					if mean > 1.5*random {
						t.Fatalf("after %d new keys: a lookup of a new key reads %.1f positions on average, %.1f in a table of that load filled at random",
							i+1, mean, random)
					}
					worst = max(worst, mean/random)
				}
				t.Logf("lookups of new keys read at most %.2f times as many positions as in a table filled at random", worst)
			})
		}
	}
}

// A full table under churn of long keys (kept in the shard's arena) with
// no sweep keeps its arena bounded: the bytes of evicted keys are reclaimed
// once they are half of it, by the inserts themselves.
func TestFullTableArenaStaysBounded(t *testing.T) {
	const maxKeys = 1000
	for _, policy := range []FullPolicy{EvictLeastRecent, RejectNewKeys} {
		l := mustNew(t, Config{Algorithm: FixedWindow, Limit: 10, Window: time.Minute, Shards: 1, MaxKeys: maxKeys, WhenFull: policy})
		s := &l.(*FixedLimiter).tab.shards[0]
		long := strings.Repeat("k", 100)
		now := at(0)
		most := 0
		for i := range 50 * maxKeys {
			if r := l.AllowN(fmt.Sprint(long, i), now, 1); !r.Allowed {
				t.Fatalf("%s: new key %d: %+v", policyName(policy), i, r)
			}
			now = now.Add(2 * time.Minute) // every stored key is idle
			s.mu.Lock()
			most = max(most, len(s.arena))
			s.mu.Unlock()
		}
		if bound := max(1<<16, 2*maxKeys*(len(long)+5)); most > bound {
			t.Errorf("%s: arena of %d bytes for %d keys of at most %d bytes, want at most %d",
				policyName(policy), most, maxKeys, len(long)+5, bound)
		}
	}
}

func TestMaxKeysRejectNewKeys(t *testing.T) {
	for _, alg := range allAlgorithms {
		l := mustNew(t, Config{Algorithm: alg, Limit: 5, Window: time.Minute, Shards: 1, MaxKeys: 64})
		for i := range 64 {
			if r := l.AllowN(fmt.Sprint("k", i), at(0), 1); !r.Allowed {
				t.Fatalf("%v key %d: %+v", alg, i, r)
			}
		}
		r := l.AllowN("new", at(1), 1)
		wantErr(t, r.Err, ErrTooManyKeys)
		if r.Allowed || l.Len() != 64 {
			t.Fatalf("%v: full table admitted a new key: %+v, len %d", alg, r, l.Len())
		}
		l.AllowN("new", at(1), 0) // a peek stores nothing and refuses nothing
		if st := l.Stats(); st.Refused != 1 || st.Allowed != 64 || st.Denied != 0 {
			t.Fatalf("%v: stats %+v, want 1 refused, 64 allowed, 0 denied", alg, st)
		}
		// A known key is still decided.
		if r := l.AllowN("k3", at(1), 1); !r.Allowed {
			t.Fatalf("%v: known key %+v", alg, r)
		}
		// Once keys are idle, a new key finds room by sampling.
		if r := l.AllowN("new", at(200), 1); !r.Allowed || r.Err != nil {
			t.Fatalf("%v: new key after the others went idle: %+v", alg, r)
		}
		if l.Len() > 64 {
			t.Fatalf("%v: len %d above the cap", alg, l.Len())
		}
	}
}

func TestMaxKeysEvictLeastRecent(t *testing.T) {
	l := mustNew(t, Config{Algorithm: SlidingLog, Limit: 5, Window: time.Minute, Shards: 1, MaxKeys: 32, WhenFull: EvictLeastRecent})
	l.SetLimit("vip", 3)
	for i := range 31 {
		l.AllowN(fmt.Sprint("k", i), at(float64(i)), 1)
	}
	for i := range 1000 {
		if r := l.AllowN(fmt.Sprint("flood", i), at(40), 1); !r.Allowed {
			t.Fatalf("flood key %d: %+v", i, r)
		}
		if l.Len() > 32 {
			t.Fatalf("len %d above the cap", l.Len())
		}
	}
	if r := l.Peek("vip", at(40), 0); r.Limit != 3 {
		t.Fatalf("key with its own limit was evicted: %+v", r)
	}
	if l.Stats().Evicted < 999 {
		t.Fatalf("stats %+v", l.Stats())
	}
}

// TestMaxKeysRejectNewKeysWhileAnyRateBusy: under RejectNewKeys a stored key
// whose short rate is idle but whose long one is not keeps its place.
func TestMaxKeysRejectNewKeysWhileAnyRateBusy(t *testing.T) {
	idleAt := map[Algorithm]float64{FixedWindow: 60, SlidingLog: 60, SlidingCounter: 66, GCRA: 6}
	for _, alg := range allAlgorithms {
		cfg := rateCfg(alg, twoRates)
		cfg.Shards, cfg.MaxKeys = 1, 1
		l := mustNew(t, cfg)
		l.AllowN("a", at(0), 1)
		if r := l.AllowN("b", at(2), 1); !errors.Is(r.Err, ErrTooManyKeys) {
			t.Fatalf("%v: a new key while the minute of the stored one is busy: %+v", alg, r)
		}
		if r := l.AllowN("b", at(idleAt[alg]-0.001), 1); !errors.Is(r.Err, ErrTooManyKeys) {
			t.Fatalf("%v: a new key just before the stored one is idle: %+v", alg, r)
		}
		if r := l.AllowN("b", at(idleAt[alg]), 1); !r.Allowed {
			t.Fatalf("%v: a new key once the stored one is idle: %+v", alg, r)
		}
	}
}

// TestMaxKeysEvictedKeysLeaveNoRateState: with MaxKeys 1, each new key evicts
// the last (EvictLeastRecent) and must start fresh on every rate, whether
// the record's rate (the longest window) or an extra one was spent: the
// shard's one position and slab entry are reused over and over.
func TestMaxKeysEvictedKeysLeaveNoRateState(t *testing.T) {
	for _, alg := range allAlgorithms {
		for _, rates := range [][]Rate{{{3, time.Second}, {10, time.Minute}}, {{10, time.Second}, {3, time.Minute}}} {
			t.Run(fmt.Sprint(alg, rates), func(t *testing.T) {
				cfg := rateCfg(alg, rates)
				cfg.Shards, cfg.MaxKeys, cfg.WhenFull = 1, 1, EvictLeastRecent
				l := mustNew(t, cfg)
				bind := rates[0].Window // the smaller limit binds
				if rates[1].Limit < rates[0].Limit {
					bind = rates[1].Window
				}
				for i := range 300 {
					key := fmt.Sprint("key", i%40) // keys return after 40 others
					if i%3 == 0 {
						key += "-long-enough-for-the-arena"
					}
					r := l.AllowN(key, at(0), 3)
					if !r.Allowed || r.Remaining != 0 || r.Window != bind {
						t.Fatalf("key %d (%q): %+v, want a fresh key's 3 units", i, key, r)
					}
					if r := l.AllowN(key, at(0), 1); r.Allowed {
						t.Fatalf("key %d: a fourth unit: %+v", i, r)
					}
					if l.Len() != 1 {
						t.Fatalf("%d keys stored, MaxKeys 1", l.Len())
					}
				}
				if st := l.Stats(); st.Evicted != 299 {
					t.Fatalf("stats %+v, want 299 evictions", st)
				}
			})
		}
	}
}
