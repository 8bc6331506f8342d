package core

// Tests of several rates per key in the key table: a key is idle only when
// every rate is; evicted keys (Sweep, MaxKeys) return fresh, leaving no
// rate's state behind; the extra records of the rates after the first
// follow their keys through growth, tombstones, rebuilds and slab
// compaction.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/zeebo/xxh3"
)

// TestRatesSweepIdleOnlyWhenEveryRateIs: with 5 per second and 3 per
// minute, a unit at 0 s leaves the second idle at 1 s but the minute busy
// until its algorithm lets the unit go; Sweep evicts the key exactly when
// its state equals a fresh key's, and the key returns as a fresh one, a
// stale instant included.
func TestRatesSweepIdleOnlyWhenEveryRateIs(t *testing.T) {
	rates := []Rate{{5, time.Second}, {3, time.Minute}}
	idleAt := map[Algorithm]float64{
		FixedWindow:    60, // the minute's window ends
		SlidingLog:     60, // the unit expires
		SlidingCounter: 66, // its 6 s bucket stops weighing
		GCRA:           20, // one emission interval of the minute
	}
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			cfg := rateCfg(alg, rates)
			cfg.Shards = 1
			l, fresh := mustNew(t, cfg), mustNew(t, cfg)
			if r := l.AllowN("k", at(0), 1); !r.Allowed {
				t.Fatal(r)
			}
			evictedAt := sweepUntilEvicted(t, l, fresh, 0, 70, 6, true)
			if evictedAt != idleAt[alg] {
				t.Fatalf("evicted at %v s, want %v s", evictedAt, idleAt[alg])
			}
			// It returns fresh: as a fresh key's first requests at the
			// eviction's instant, for a request read before it too.
			for i, sec := range []float64{1, evictedAt, evictedAt + 0.5} {
				for range 4 {
					got, want := l.AllowN("k", at(sec), 1), fresh.AllowN("k", at(max(sec, evictedAt)), 1)
					if got.Allowed != want.Allowed || got.Remaining != want.Remaining || got.Window != want.Window ||
						!at(sec).Add(got.ResetAfter).Equal(at(max(sec, evictedAt)).Add(want.ResetAfter)) {
						t.Fatalf("return %d at %v s: %+v, want as a fresh key's %+v", i, sec, got, want)
					}
				}
			}
		})
	}
}

// sweepUntilEvicted sweeps l every 100 ms from after sec0 to sec1 until it
// evicts its one key "k", checking that a sweep evicts it only when its
// peeks at every cost up to maxCost equal those of fresh's key "k", which
// is never used, and, if iff, always then; it returns the instant of the
// eviction, -1 if none. (Peeks show the binding rate: a rate that cannot
// bind, its limit well above another's, may hide its usage from them.)
func sweepUntilEvicted(t *testing.T, l, fresh Limiter, sec0, sec1 float64, maxCost int, iff bool) float64 {
	t.Helper()
	for i := int(sec0*10) + 1; i <= int(sec1*10); i++ {
		x := float64(i) / 10
		p, f := fingerprint(l, "k", at(x), maxCost), fingerprint(fresh, "k", at(x), maxCost)
		same := fmt.Sprint(p) == fmt.Sprint(f)
		n := l.Sweep(at(x))
		if n != 0 && !same || n == 0 && same && iff {
			t.Fatalf("sweep at %v s evicted %d; the key's peeks %+v, a fresh key's %+v", x, n, p, f)
		}
		if n != 0 {
			return x
		}
	}
	return -1
}

// TestRatesSweepShortWindowOutlastsLong: a key is idle only when every
// rate is, and the last rate to go idle need not be the longest window's:
// fixed windows of 7 s and a minute do not nest (a unit at 59.5 s leaves
// the minute idle at 60 s and its 7 s window [55 s, 62 s) busy until
// 62 s: t0 is 1 s past a multiple of 7 s); one-bucket counters of 1.5 s
// and 1.4 s windows let a unit at 1.85 s go at 4.5 s and 4.6 s; GCRA's 1
// per 10 s holds a unit longer than 10 per minute. The sliding log's
// shorter windows always end first: it waits for the minute.
func TestRatesSweepShortWindowOutlastsLong(t *testing.T) {
	for _, c := range []struct {
		alg        Algorithm
		rates      []Rate
		buckets    int
		used, idle float64
	}{
		{FixedWindow, []Rate{{5, time.Minute}, {2, 7 * time.Second}}, 0, 59.5, 62},
		{SlidingCounter, []Rate{{2, 1500 * time.Millisecond}, {2, 1400 * time.Millisecond}}, 1, 1.85, 4.6},
		{GCRA, []Rate{{10, time.Minute}, {1, 10 * time.Second}}, 0, 59.5, 69.5},
		{SlidingLog, []Rate{{5, time.Minute}, {2, 7 * time.Second}}, 0, 59.5, 119.5},
	} {
		t.Run(c.alg.String(), func(t *testing.T) {
			cfg := Config{Algorithm: c.alg, Rates: c.rates, Buckets: c.buckets, Shards: 1, JanitorInterval: -1}
			l, fresh := mustNew(t, cfg), mustNew(t, cfg)
			if r := l.AllowN("k", at(c.used), 1); !r.Allowed {
				t.Fatal(r)
			}
			if got := sweepUntilEvicted(t, l, fresh, c.used, c.idle+10, 6, false); got != c.idle {
				t.Fatalf("evicted at %v s, want %v s", got, c.idle)
			}
		})
	}
}

// TestRatesEvictedKeysLeaveNoState: with MaxKeys 1, each new key evicts
// the last (EvictLeastRecent) and must start fresh on every rate, whether
// the record's rate (the longest window) or an extra one was spent: the
// shard's one position and slab entry are reused over and over.
func TestRatesEvictedKeysLeaveNoState(t *testing.T) {
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

// TestRatesRejectNewKeysWhileAnyRateBusy: under RejectNewKeys a stored key
// whose short rate is idle but whose long one is not keeps its place.
func TestRatesRejectNewKeysWhileAnyRateBusy(t *testing.T) {
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

// fingerprint is what peeks tell of every rate of a key at now: for each
// cost up to the largest limit and one more, the Result.
func fingerprint(l Limiter, key string, now time.Time, maxLimit int) []Result {
	var out []Result
	for n := range maxLimit + 2 {
		out = append(out, l.Peek(key, now, n))
	}
	return out
}

// TestRatesStateFollowsKeys gives keys distinct usage on each of three
// rates, then grows the table (moving records), thins it out (tombstones),
// rebuilds it, sweeps, evicts to a cap, and grows it again: every key's
// peeks at every cost, which see each rate through RetryAfter, must stay
// what they were.
func TestRatesStateFollowsKeys(t *testing.T) {
	rates := []Rate{{30, 10 * time.Second}, {12, time.Second}, {20, 5 * time.Second}}
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			cfg := rateCfg(alg, rates)
			cfg.Shards = 1
			l := mustNew(t, cfg)
			p := probe(l)
			p.setSeed(tableSeed)
			end := at(1004.5)
			keys := keyPool("key", 200)
			for i, k := range keys {
				for j, m := 0, 1+i%11; j < m; j++ {
					ts := end.Add(-time.Duration(m-1-j) * 150 * time.Millisecond)
					l.AllowN(k, ts, 1+(7*i+j)%5)
				}
			}
			want := map[string][]Result{}
			distinct := map[string]bool{}
			for _, k := range keys {
				want[k] = fingerprint(l, k, end, 30)
				distinct[fmt.Sprint(want[k])] = true
			}
			if len(distinct) < 15 {
				t.Fatalf("keys too alike to tell apart: %d distinct fingerprints", len(distinct))
			}
			check := func(phase string) {
				t.Helper()
				stored := p.check(t, 0)
				for _, k := range keys {
					if _, ok := stored[k]; !ok {
						t.Fatalf("%s: key %.20q not stored", phase, k)
					}
					if got := fingerprint(l, k, end, 30); fmt.Sprint(got) != fmt.Sprint(want[k]) {
						t.Fatalf("%s: key %.20q:\n got %+v\nwant %+v", phase, k, got, want[k])
					}
				}
			}
			check("start")
			fill := keyPool("fill", 2000)
			for _, k := range fill {
				l.AllowN(k, at(0), 1) // idle at end
			}
			check("grown")
			for _, k := range fill[:1500] {
				l.Reset(k)
			}
			check("thinned")
			p.rebuild(0)
			check("rebuilt")
			if n := l.Sweep(end); n != 500 {
				t.Fatalf("swept %d fillers, want 500", n)
			}
			check("swept")
			for _, k := range keyPool("late", 1500) {
				l.AllowN(k, end, 1)
			}
			check("grown again")
			for _, k := range keyPool("late", 1500) {
				l.Reset(k)
			}
			p.rebuild(0)
			check("shrunk")
		})
	}
}

// extraWord is the value the extras model test keeps in the lim word of
// extra record k of a key whose record's lim word is v.
func extraWord(v uint32, k int) uint32 { return v*40503 + uint32(k+1)*2654435761 }

// TestRatesTableExtrasModel runs random inserts, evictions (single and in
// runs), rebuilds, rehashes to odd sizes and maybeRebuild on a shard of a
// three-rate limiter, against a map of what each key's record, side words
// and extra records hold, with the cold-path hash forced into long probe
// runs and wrap-around: the extras follow their keys, and every position
// or slab entry without a key holds zero extras, as insert hands them out.
func TestRatesTableExtrasModel(t *testing.T) {
	cfg := func(alg Algorithm) Config {
		return Config{Algorithm: alg, Rates: []Rate{{5, time.Minute}, {3, time.Second}, {4, 10 * time.Second}},
			Buckets: 4, Shards: 1, MaxKeyBytes: 400, JanitorInterval: -1}
	}
	for _, alg := range allAlgorithms {
		for mode := range hashModes {
			t.Run(alg.String()+"/"+hashModes[mode].name, func(t *testing.T) {
				seed := uint64(mode)*7919 + uint64(alg)
				switch l := mustNew(t, cfg(alg)).(type) {
				case *FixedLimiter:
					runExtrasModel(t, &l.tab, seed, mode)
				case *LogLimiter:
					runExtrasModel(t, &l.tab, seed, mode)
				case *CounterLimiter:
					runExtrasModel(t, &l.tab, seed, mode)
				case *GCRALimiter:
					runExtrasModel(t, &l.tab, seed, mode)
				}
			})
		}
	}
}

// checkExtras checks s against m, extras included. Requires s.mu held.
func checkExtras[E any](tb testing.TB, tab *table[E], s *shard[E], m *tableModel) {
	tb.Helper()
	checkModel(tb, tab, s, m)
	if s.extras == 0 {
		tb.Fatal("the limiter keeps no extra records")
	}
	keys := checkShape(tb, tab, s)
	for key, v := range m.vals {
		_, extra := tab.sideOf(s, keys[key])
		if len(extra) != s.extras {
			tb.Fatalf("key %.20q: %d extras, want %d", key, len(extra), s.extras)
		}
		for k := range extra {
			if got := *tab.alg.limitWord(&extra[k]); got != extraWord(v, k) {
				tb.Fatalf("key %.20q: extra %d holds %d, want %d (the extras did not move with the key)", key, k, got, extraWord(v, k))
			}
		}
	}
	var zero E
	isZero := func(extra []E) bool {
		for k := range extra {
			if any(extra[k]) != any(zero) {
				return false
			}
		}
		return true
	}
	if tab.slab != nil {
		for _, ref := range s.sideFree {
			if x := int(ref) * s.extras; !isZero(s.extra[x : x+s.extras]) {
				tb.Fatalf("free slab entry %d keeps extras %+v", ref, s.extra[x:x+s.extras])
			}
		}
		return
	}
	if len(s.extra) != len(s.recs)*s.extras {
		tb.Fatalf("%d extras for %d positions, %d each", len(s.extra), len(s.recs), s.extras)
	}
	for i := range s.recs {
		if !s.stored(i) {
			if _, extra := tab.sideOf(s, uint32(i)); !isZero(extra) {
				tb.Fatalf("position %d (klen %d) without a key keeps extras %+v", i, s.recs[i].klen, extra)
			}
		}
	}
}

func runExtrasModel[E any](t *testing.T, tab *table[E], seed uint64, mode int) {
	setTableSeed(tab, tableSeed)
	s := &tab.shards[0]
	hm := hashModes[mode]
	if hm.rehash != nil {
		rehash = hm.rehash
		defer func() { rehash = xxh3.HashSeed }()
	}
	r := rand.New(rand.NewPCG(seed, 0xE7A5))
	m := &tableModel{vals: map[string]uint32{}, touched: map[string]bool{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	const now = int64(t0Unix) * 1e9
	grows, evicts, rebuilds := 0, 0, 0
	evictKey := func(key string) {
		slot, ok := find(s, s.hashOf([]byte(key)), key)
		if !ok {
			t.Fatalf("key %.20q to evict not found", key)
		}
		tab.evict(s, slot)
		m.remove(key)
		evicts++
	}
	insertKey := func() {
		key := tableKey(r)
		h := s.hashOf([]byte(key))
		if _, ok := m.vals[key]; ok {
			return
		}
		n := len(s.recs)
		slot, err := insert(tab, s, h, key, now)
		if err != nil {
			t.Fatalf("insert: %v", err)
		}
		if len(s.recs) != n {
			grows++
		}
		rec := s.rec(slot)
		side, extra := tab.sideOf(s, slot)
		var zero E
		for k := range extra {
			if any(extra[k]) != any(zero) {
				t.Fatalf("new key's extra %d is %+v, not zero", k, extra[k])
			}
		}
		tab.alg.init(s, rec, slot, now)
		v := 1 + r.Uint32N(limitMask)
		*tab.alg.limitWord(rec) = v
		for k := range side {
			side[k] = sideWord(v, k)
		}
		for k := range extra {
			*tab.alg.limitWord(&extra[k]) = extraWord(v, k)
		}
		m.add(key, v)
	}
	growing := true
	for op := range hm.ops {
		if len(m.keys) >= hm.maxLive {
			growing = false
		} else if len(m.keys) <= hm.maxLive/10 {
			growing = true
		}
		insertP := 30
		if growing {
			insertP = 65
		}
		p := 0
		if r.IntN(100) >= insertP {
			p = 1 + r.IntN(99)
		}
		switch {
		case p == 0:
			for range 1 + r.IntN(hm.batch) {
				insertKey()
			}
		case p < 60:
			for range 1 + r.IntN(hm.batch) {
				if len(m.keys) > 0 {
					evictKey(m.keys[r.IntN(len(m.keys))])
				}
			}
		case p < 75: // a run of neighbours
			if len(m.keys) == 0 {
				break
			}
			first := m.keys[r.IntN(len(m.keys))]
			slot, _ := find(s, s.hashOf([]byte(first)), first)
			var run []string
			for i, n := slot, uint32(len(s.recs)); len(run) < 1+r.IntN(8) && s.recs[i].klen != emptySlot; i = (i + 1) % n {
				if s.stored(int(i)) {
					run = append(run, string(s.keyOf(i)))
				}
			}
			for _, key := range run {
				evictKey(key)
			}
		case p < 82:
			tab.rebuild(s)
			rebuilds++
		case p < 90:
			tab.maybeRebuild(s)
		case p < 96:
			tab.rehash(s, tableLen(s.live)+r.IntN(50))
			rebuilds++
		default:
			keep := 0
			if r.IntN(3) > 0 {
				keep = len(m.keys) / 5
			}
			for len(m.keys) > keep {
				evictKey(m.keys[r.IntN(len(m.keys))])
			}
			tab.maybeRebuild(s)
		}
		if op%4 == 0 || len(m.keys) < 50 {
			checkExtras(t, tab, s, m)
		}
	}
	checkExtras(t, tab, s, m)
	// Evictions close their gaps (no tombstones), so the table grows only
	// when the live keys outgrow it: with 80 keys at most, once or twice.
	if grows < 1 || evicts < 50 || rebuilds < 2 {
		t.Fatalf("the run did not exercise the table: %d grows, %d evictions, %d rebuilds", grows, evicts, rebuilds)
	}
}

// TestRatesJanitorIntervalDefault: the janitor's default interval is the
// window clamped to [1 s, 1 min]; with several rates, the longest window,
// after which a key used once is idle. Config.Window is 0 then, and the
// default read it: a limiter of 3 per second and 100 per hour swept its
// whole table every second, though no key could be idle for an hour.
func TestRatesJanitorIntervalDefault(t *testing.T) {
	for _, c := range []struct {
		rates []Rate
		want  time.Duration
	}{
		{[]Rate{{3, time.Second}, {100, time.Hour}}, time.Minute},
		{[]Rate{{3, 10 * time.Millisecond}, {5, 5 * time.Second}}, 5 * time.Second},
		{[]Rate{{5, 30 * time.Second}}, 30 * time.Second},
		{[]Rate{{5, time.Millisecond}, {9, 2 * time.Millisecond}}, time.Second},
	} {
		l, err := New(Config{Algorithm: GCRA, Rates: c.rates})
		if err != nil {
			t.Fatal(err)
		}
		got := l.Config().JanitorInterval
		l.Close()
		if got != c.want {
			t.Errorf("rates %v: janitor interval %v, want %v", c.rates, got, c.want)
		}
	}
}
