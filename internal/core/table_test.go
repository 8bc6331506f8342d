package core

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// White-box tests that try to break the open-addressing key table of
// shard.go through the public API: the MaxKeys policies, and the side words
// and extra records following their records through growth and rebuilds.
// The model test is in table_model_test.go, the sweeps racing writers in
// table_sweep_test.go, the checks they share in table_check_test.go.

// tableSeed is the hash seed the tests give every table, so that positions,
// probe runs and makeRoom's samples are the same on every run.
const tableSeed = 0x243F6A8885A308D3

// setTableSeed replaces the random seed of tab before any key is stored.
func setTableSeed[E any](tab *table[E], seed uint64) {
	tab.seed = seed
	for i := range tab.shards {
		tab.shards[i].seed = seed
	}
}

// tableKey returns a random key: mostly short keys over a two-letter
// alphabet (so draws repeat and share prefixes), else a long key of 15 to
// 300 bytes, favouring the lengths at the inline limit and the klen markers.
func tableKey(r *rand.Rand) string {
	var n int
	switch p := r.IntN(100); {
	case p < 55:
		n = 1 + r.IntN(inlineKey)
	case p < 65:
		n = []int{inlineKey, inlineKey + 1, longKey - 1, longKey, longKey + 1}[r.IntN(5)]
	default:
		n = inlineKey + 1 + r.IntN(300-inlineKey)
	}
	b := make([]byte, n)
	for i := range b {
		if r.IntN(8) == 0 {
			b[i] = byte(r.Uint32()) // any byte, zero included
		} else {
			b[i] = "ab"[r.IntN(2)]
		}
	}
	return string(b)
}

// tableProbe gives the public-API tests a look into a limiter's table.
type tableProbe interface {
	// check checks shard i's invariants and returns its stored keys.
	check(tb testing.TB, i int) map[string]uint32
	setSeed(seed uint64)
	// rebuild rebuilds shard i's table at the size for its keys.
	rebuild(i int)
}

type probeOf[E any] struct{ tab *table[E] }

func (p probeOf[E]) check(tb testing.TB, i int) map[string]uint32 {
	tb.Helper()
	s := &p.tab.shards[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	return checkShape(tb, p.tab, s)
}

func (p probeOf[E]) setSeed(seed uint64) { setTableSeed(p.tab, seed) }

func (p probeOf[E]) rebuild(i int) {
	s := &p.tab.shards[i]
	s.mu.Lock()
	p.tab.rebuild(s)
	s.mu.Unlock()
}

func probe(l Limiter) tableProbe {
	switch l := l.(type) {
	case *FixedLimiter:
		return probeOf[fixedRec]{&l.tab}
	case *LogLimiter:
		return probeOf[logRec]{&l.tab}
	case *CounterLimiter:
		return probeOf[counterRec]{&l.tab}
	case *GCRALimiter:
		return probeOf[gcraRec]{&l.tab}
	}
	panic(fmt.Sprintf("no table in %T", l))
}

// keyPool returns n distinct keys, every third one long.
func keyPool(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint(prefix, i)
		if i%3 == 2 {
			keys[i] += strings.Repeat("~", 15+i%200)
		}
	}
	return keys
}

// TestTableMaxKeys drives a capped table through the public API: keys come
// and go in epochs three windows apart (at an epoch's start every stored
// key is idle), makeRoom evicts while the table grows and rebuilds, and
// after every call the stored keys must be the model's, each with the
// units it was admitted this epoch. EvictLeastRecent must always find
// room (only one key has a limit of its own), RejectNewKeys must find room
// when every stored key is idle and must not when none is.
func TestTableMaxKeys(t *testing.T) {
	for _, alg := range allAlgorithms {
		for _, policy := range []FullPolicy{EvictLeastRecent, RejectNewKeys} {
			for _, maxKeys := range []int{1, 3, 13, 40} {
				name := fmt.Sprintf("%v/%s/max%d", alg, policyName(policy), maxKeys)
				t.Run(name, func(t *testing.T) { runTableMaxKeys(t, alg, policy, maxKeys) })
			}
		}
	}
}

func policyName(p FullPolicy) string {
	if p == EvictLeastRecent {
		return "EvictLeastRecent"
	}
	return "RejectNewKeys"
}

func runTableMaxKeys(t *testing.T, alg Algorithm, policy FullPolicy, maxKeys int) {
	const limit = 1000
	l := mustNew(t, Config{Algorithm: alg, Limit: limit, Window: time.Minute, Shards: 1,
		MaxKeys: maxKeys, WhenFull: policy, MaxKeyBytes: 400})
	p := probe(l)
	p.setSeed(tableSeed)
	r := rand.New(rand.NewPCG(uint64(maxKeys), uint64(alg)*2+uint64(policy)))
	pool := keyPool("k", 3*maxKeys+6)
	count := map[string]int{} // stored key -> units admitted this epoch
	vip := ""
	if maxKeys >= 6 {
		vip = pool[0]
		if err := l.SetLimit(vip, limit); err != nil {
			t.Fatal(err)
		}
		count[vip] = 0
	}
	var spurious []string
	for epoch := range 6 {
		now := at(float64(epoch * 180))
		for k := range count {
			count[k] = 0
		}
		for op := range 30 {
			key := pool[r.IntN(len(pool))]
			if op == 0 && epoch > 0 {
				// A new key while every stored key is idle.
				for _, k := range pool {
					if _, ok := count[k]; !ok {
						key = k
						break
					}
				}
			}
			before := p.check(t, 0)
			if len(before) != len(count) {
				t.Fatalf("epoch %d op %d: %d keys stored, model %d", epoch, op, len(before), len(count))
			}
			for k := range count {
				if _, ok := before[k]; !ok {
					t.Fatalf("epoch %d op %d: model key %.20q not stored", epoch, op, k)
				}
			}
			evicted := l.Stats().Evicted
			res := l.AllowN(key, now, 1)
			after := p.check(t, 0)
			if used, ok := count[key]; ok {
				if !res.Allowed || res.Err != nil || res.Remaining != limit-used-1 || len(after) != len(before) {
					t.Fatalf("epoch %d op %d: stored key %.20q with %d used: %+v (%d keys, were %d)", epoch, op, key, used, res, len(after), len(before))
				}
				count[key]++
				continue
			}
			full := len(before) >= maxKeys
			idle, busy := 0, 0
			for k, used := range count {
				switch {
				case k == vip:
				case used == 0:
					idle++
				default:
					busy++
				}
			}
			if res.Err != nil {
				if !errors.Is(res.Err, ErrTooManyKeys) || res.Allowed || !full || len(after) != len(before) {
					t.Fatalf("epoch %d op %d: new key %.20q: %+v (full %v, %d keys, were %d)", epoch, op, key, res, full, len(after), len(before))
				}
				if policy == EvictLeastRecent && idle+busy > 0 || policy == RejectNewKeys && idle > 0 && busy == 0 {
					spurious = append(spurious, fmt.Sprintf("epoch %d op %d: %d keys stored (%d idle, %d busy) in a table of %d",
						epoch, op, len(before), idle, busy, tableLen(len(before)+1)))
				}
				continue
			}
			if policy == RejectNewKeys && full && idle == 0 {
				t.Fatalf("epoch %d op %d: RejectNewKeys admitted a new key with no idle key stored: %+v", epoch, op, res)
			}
			if !res.Allowed || res.Remaining != limit-1 {
				t.Fatalf("epoch %d op %d: new key %.20q: %+v", epoch, op, key, res)
			}
			var gone []string
			for k := range before {
				if _, ok := after[k]; !ok {
					gone = append(gone, k)
				}
			}
			if _, ok := after[key]; !ok || len(gone) > 1 || len(gone) == 1 && !full || len(after) != len(before)+1-len(gone) {
				t.Fatalf("epoch %d op %d: new key %.20q stored %v, evicted %d (full %v)", epoch, op, key, ok, len(gone), full)
			}
			if got := l.Stats().Evicted - evicted; got != uint64(len(gone)) {
				t.Fatalf("epoch %d op %d: Stats.Evicted grew by %d, %d keys left", epoch, op, got, len(gone))
			}
			for _, k := range gone {
				if k == vip {
					t.Fatalf("epoch %d op %d: the key with its own limit was evicted", epoch, op)
				}
				if policy == RejectNewKeys && count[k] != 0 {
					t.Fatalf("epoch %d op %d: RejectNewKeys evicted %.20q with %d units this epoch", epoch, op, k, count[k])
				}
				delete(count, k)
			}
			count[key] = 1
			if l.Len() > maxKeys {
				t.Fatalf("epoch %d op %d: %d keys above MaxKeys %d", epoch, op, l.Len(), maxKeys)
			}
		}
		if epoch%3 == 2 {
			p.rebuild(0)
		}
	}
	if len(spurious) > 0 {
		t.Errorf("%d new keys failed with ErrTooManyKeys although the policy had a key to evict; first: %s",
			len(spurious), spurious[0])
	}
}

// TestTableMakeRoomFindsSparseKeys is the plainest form of the MaxKeys
// check: with a small per-shard cap, a new key must find room every time
// under EvictLeastRecent, and must find an idle key under RejectNewKeys when
// every stored key is idle.
func TestTableMakeRoomFindsSparseKeys(t *testing.T) {
	for _, policy := range []FullPolicy{EvictLeastRecent, RejectNewKeys} {
		for _, maxKeys := range []int{1, 2, 4, 8} {
			l := mustNew(t, Config{Algorithm: FixedWindow, Limit: 10, Window: time.Minute, Shards: 1,
				MaxKeys: maxKeys, WhenFull: policy})
			probe(l).setSeed(tableSeed)
			failed := 0
			for i := range 200 {
				now := at(0)
				if policy == RejectNewKeys {
					now = at(float64(120 * i)) // every stored key is idle
				}
				if r := l.AllowN(fmt.Sprint("key", i), now, 1); r.Err != nil {
					failed++
				}
			}
			if failed > 0 {
				t.Errorf("%s, MaxKeys %d, 1 shard: %d of 200 new keys got ErrTooManyKeys, though a stored key could be evicted",
					policyName(policy), maxKeys, failed)
			}
		}
	}
}

// TestTableSideFollowsRecords gives keys distinct usage spread over several
// buckets, on one rate and on three, then grows, thins out (keys moving
// back), rebuilds, sweeps, grows the table again and shrinks it: every
// key's peeks (with several rates at every cost, which see each rate
// through RetryAfter) must stay what they were, and for a shared limiter Collect
// must report each key's units once.
func TestTableSideFollowsRecords(t *testing.T) {
	type variant struct {
		name     string
		shared   bool
		cfg      Config
		step     time.Duration // between a key's admissions
		distinct int           // fingerprints at least
		end      float64       // the last admissions and the peeks
		maxCost  int           // the costs peeked, 0 to maxCost+1 (-1: 0 only)
	}
	var variants []variant
	threeRates := []Rate{{30, 10 * time.Second}, {12, time.Second}, {20, 5 * time.Second}}
	for _, alg := range allAlgorithms {
		variants = append(variants,
			variant{alg.String(), false, Config{Algorithm: alg, Limit: 40, Window: 10 * time.Second, Buckets: 10, Shards: 1}, 500 * time.Millisecond, 6, 1005, -1},
			variant{alg.String() + "/3_rates", false, Config{Algorithm: alg, Rates: threeRates, Buckets: 10, Shards: 1}, 150 * time.Millisecond, 15, 1004.5, 30})
	}
	variants = append(variants,
		variant{"SlidingCounter-4-buckets", false, Config{Algorithm: SlidingCounter, Limit: 40, Window: 8 * time.Second, Buckets: 4, Shards: 1}, 400 * time.Millisecond, 6, 1005, -1},
		variant{"shared-SlidingCounter", true, Config{Algorithm: SlidingCounter, Limit: 40, Window: 10 * time.Second, Buckets: 10, Shards: 1}, 500 * time.Millisecond, 6, 1005, -1},
		variant{"shared-FixedWindow", true, Config{Algorithm: FixedWindow, Limit: 40, Window: 10 * time.Second, Shards: 1}, 500 * time.Millisecond, 6, 1005, -1},
	)
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			var l Limiter
			var tab Synced
			if v.shared {
				l, tab = newSharedT(t, v.cfg)
			} else {
				l = mustNew(t, v.cfg)
			}
			p := probe(l)
			p.setSeed(tableSeed)
			end := at(v.end) // mid-window: the spread below stays in one 10 s fixed window
			keys := keyPool("key", 200)
			units := map[string]int{}
			for i, k := range keys {
				// Admissions spread over several counter buckets, the
				// last at end, so no key is idle.
				for j, m := 0, 1+i%11; j < m; j++ {
					ts := end.Add(-time.Duration(m-1-j) * v.step)
					n := 1 + (7*i+j)%5
					if r := l.AllowN(k, ts, n); r.Allowed {
						units[k] += n
					}
				}
			}
			want := map[string][]Result{}
			distinct := map[string]bool{}
			for _, k := range keys {
				want[k] = fingerprint(l, k, end, v.maxCost)
				distinct[fmt.Sprint(want[k])] = true
			}
			if len(distinct) < v.distinct {
				t.Fatalf("keys too alike to tell apart: %d distinct fingerprints", len(distinct))
			}
			check := func(phase string) {
				t.Helper()
				stored := p.check(t, 0)
				for _, k := range keys {
					if _, ok := stored[k]; !ok {
						t.Fatalf("%s: key %.20q not stored", phase, k)
					}
					if got := fingerprint(l, k, end, v.maxCost); fmt.Sprint(got) != fmt.Sprint(want[k]) {
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
			late := keyPool("late", 1500)
			for _, k := range late {
				l.AllowN(k, end, 1)
			}
			check("grown again")
			if tab != nil {
				checkCollectedOnce(t, tab, keys, units)
			}
			for _, k := range late {
				l.Reset(k)
			}
			p.rebuild(0)
			check("shrunk")
		})
	}
}

// checkCollectedOnce collects every shard of tab: each key must come once,
// with the units it was admitted.
func checkCollectedOnce(t *testing.T, tab Synced, keys []string, units map[string]int) {
	t.Helper()
	got := map[string]int{}
	for _, f := range collectAll(tab) {
		if _, dup := got[f.Key]; dup {
			t.Fatalf("key %.20q collected twice", f.Key)
		}
		sum := 0
		for _, d := range f.Deltas {
			sum += int(d)
		}
		got[f.Key] = sum
	}
	for _, k := range keys {
		if got[k] != units[k] {
			t.Fatalf("key %.20q: collected %d units, admitted %d", k, got[k], units[k])
		}
	}
}

// A shard at MaxKeys that holds an idle key must evict it for a new key
// (README: "idle keys are always evicted first"; ErrTooManyKeys: "none could
// be evicted under the configured FullPolicy"), and EvictLeastRecent must
// find a key without a limit of its own when there is one. A first version
// of makeRoom for the open-addressing table drew a random position and
// walked to the next key: a key right after another was drawn with
// probability 1/16 per sample, and about 5% of these limiters missed it.
func TestTableMakeRoomFindsEvictableKeys(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0).Truncate(time.Minute)
	for _, alg := range []Algorithm{FixedWindow, SlidingLog, SlidingCounter, GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			idleMiss, lruMiss := 0, 0
			for trial := range 200 {
				l, err := New(Config{Algorithm: alg, Limit: 5, Window: time.Minute, Shards: 1, MaxKeys: 3, JanitorInterval: -1})
				if err != nil {
					t.Fatal(err)
				}
				l.AllowAt(fmt.Sprint("idle", trial), t0) // idle a minute later
				t1 := t0.Add(2 * time.Minute)
				l.AllowAt("a", t1)
				l.AllowAt("b", t1)
				if r := l.AllowN("new", t1, 1); errors.Is(r.Err, ErrTooManyKeys) {
					idleMiss++
				}
				l.Close()

				l, err = New(Config{Algorithm: alg, Limit: 5, Window: time.Minute, Shards: 1, MaxKeys: 3, WhenFull: EvictLeastRecent, JanitorInterval: -1})
				if err != nil {
					t.Fatal(err)
				}
				if err := l.SetLimit(fmt.Sprint("vip", trial), 10); err != nil {
					t.Fatal(err)
				}
				for i := range 20 {
					if r := l.AllowN(fmt.Sprint("k", i), t0, 1); errors.Is(r.Err, ErrTooManyKeys) {
						lruMiss++
					}
				}
				l.Close()
			}
			if idleMiss > 0 || lruMiss > 0 {
				t.Errorf("ErrTooManyKeys with an evictable key stored: %d/200 limiters missed the idle key (RejectNewKeys), %d/4000 new keys rejected (EvictLeastRecent)", idleMiss, lruMiss)
			}
		})
	}
}

// The sliding log's slab gives its memory back: after most keys went idle
// and a sweep evicted them, the rebuilt shard's slab holds about the
// survivors' extra records, not the peak's, and the survivors keep their
// usage (a key's entry moved with it or the Peek would differ).
func TestTableSideSlabShrinks(t *testing.T) {
	cfg := Config{Algorithm: SlidingLog, Rates: []Rate{{40, 10 * time.Second}, {20, time.Second}}, Shards: 1, JanitorInterval: -1}
	l := mustNew(t, cfg).(*LogLimiter)
	defer l.Close()
	if l.tab.slab == nil {
		t.Fatal("the sliding log of two rates keeps no slab")
	}
	t0 := time.Unix(1_700_000_000, 0)
	keep := keyPool("keep", 100)
	for i, k := range keep {
		l.AllowN(k, t0.Add(30*time.Second), 1+i%7)
	}
	for _, k := range keyPool("gone", 10_000) {
		l.AllowN(k, t0, 1)
	}
	end := t0.Add(35 * time.Second) // "gone" keys are idle, "keep" keys not
	want := map[string]Result{}
	for _, k := range keep {
		want[k] = l.Peek(k, end, 0)
	}
	s := &l.tab.shards[0]
	peak := len(s.extra)
	if n := l.Sweep(end); n != 10_000 {
		t.Fatalf("swept %d keys, want 10000", n)
	}
	s.mu.Lock()
	checkShape(t, &l.tab, s)
	recs, capRecs := len(s.extra), cap(s.extra)
	s.mu.Unlock()
	if extras := l.tab.shards[0].extras; recs != len(keep)*extras || capRecs > 2*len(keep)*extras {
		t.Fatalf("slab after the sweep: %d extra records (capacity %d), peak %d; want %d", recs, capRecs, peak, len(keep)*extras)
	}
	for _, k := range keep {
		if got := l.Peek(k, end, 0); got != want[k] {
			t.Fatalf("key %q: %+v after the sweep, want %+v", k, got, want[k])
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
