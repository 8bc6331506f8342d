package bench

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The scenarios. Each BenchmarkX runs one sub-benchmark per limiter, named
// BenchmarkX/<limiter>. Scenarios without "Now" call Allow (or AllowBytes),
// which reads the limiter's clock, for every limiter; their "Now" twins pass
// an explicit instant (shardlimit's AllowAt and AllowBytesAt, x/time/rate's
// AllowN, httprate's window arguments) for the limiters whose API takes one.
// Parallel scenarios are meant to run at -cpu 1,2,...: each runs GOMAXPROCS
// goroutines.

// hotKey is the key of the single-key scenarios.
const hotKey = "10.20.30.40"

// newLimiter builds f's limiter for p, skipping the benchmark if Redis is
// not answering.
func newLimiter(b *testing.B, f Factory, p Profile) Keyed {
	b.Helper()
	l, err := f.New(p)
	if errors.Is(err, ErrNoRedis) {
		b.Skip(err)
	}
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// atFactories returns the factories whose limiters implement AtKeyed.
func atFactories() []Factory {
	var fs []Factory
	for _, f := range Factories() {
		l, err := f.New(Denied)
		if err != nil {
			continue
		}
		if _, ok := l.(AtKeyed); ok {
			fs = append(fs, f)
		}
		l.Close()
	}
	return fs
}

// prepare makes key an existing key of l (Redis state is reset first) and
// reports whether that first request was admitted.
func prepare(l Keyed, key string) bool {
	if r, ok := l.(interface{ Reset(string) error }); ok {
		_ = r.Reset(key)
	}
	return l.Allow(key)
}

// forget removes key's state from a Redis-backed limiter, so no benchmark
// key outlives its run in the shared Redis.
func forget(l Keyed, key string) {
	if r, ok := l.(interface{ Reset(string) error }); ok {
		_ = r.Reset(key)
	}
}

// unexpected reports decisions that went the wrong way: an error for
// shardlimit (its adapter tests pin its behaviour), a custom metric for a
// peer (errors inside a peer, e.g. exhausted CAS retries, read as denials).
func unexpected(b *testing.B, l Keyed, bad int64, what string) {
	b.Helper()
	if bad == 0 {
		return
	}
	if _, ours := l.(*Ours); ours {
		b.Errorf("%s: %d of %d decisions %s", l.Name(), bad, b.N, what)
		return
	}
	b.ReportMetric(float64(bad)/float64(b.N), what+"/op")
}

// each runs one sub-benchmark per factory with a fresh limiter for p.
func each(b *testing.B, fs []Factory, p Profile, run func(b *testing.B, l Keyed)) {
	for _, f := range fs {
		b.Run(f.Name, func(b *testing.B) {
			l := newLimiter(b, f, p)
			defer l.Close()
			b.ReportAllocs()
			run(b, l)
		})
	}
}

// nowSeq supplies the instants of one goroutine in the "Now" scenarios: a
// fixed instant, or for a Stepper limiter an instant advancing by its step
// times the number of goroutines, re-aligned with the other goroutines
// every 256 calls so that they stay within microseconds of each other (as
// callers reading one clock do).
type nowSeq struct {
	fixed  time.Time
	t      int64
	step   int64
	n      uint32
	shared *atomic.Int64
}

func newNowSeq(l Keyed, base time.Time, goroutines int, shared *atomic.Int64) *nowSeq {
	s := &nowSeq{fixed: base, t: base.UnixNano(), shared: shared}
	if st, ok := l.(Stepper); ok {
		s.step = int64(st.Step()) * int64(goroutines)
	}
	return s
}

func (s *nowSeq) next() time.Time {
	if s.step == 0 {
		return s.fixed
	}
	s.t += s.step
	if s.n++; s.n&255 == 0 && s.shared != nil {
		if m := s.shared.Load(); m > s.t {
			s.t = m
		} else {
			s.shared.Store(s.t)
		}
	}
	return time.Unix(0, s.t)
}

// warm runs a Stepper limiter's key to its steady state (a window's worth
// of requests in its ring) before the timer starts.
func warm(l AtKeyed, key string, s *nowSeq) {
	if s.step == 0 {
		return
	}
	for range int(AllowedLog.Window/time.Duration(s.step)) + 1 {
		l.AllowAt(key, s.next())
	}
}

// BenchmarkHotKey: one existing key, one goroutine, Allow with the
// limiter's own clock read.
func BenchmarkHotKey(b *testing.B) {
	each(b, Factories(), Allowed, func(b *testing.B, l Keyed) {
		prepare(l, hotKey)
		defer forget(l, hotKey)
		var denied int64
		b.ResetTimer()
		for range b.N {
			if !l.Allow(hotKey) {
				denied++
			}
		}
		b.StopTimer()
		unexpected(b, l, denied, "denied")
	})
}

// BenchmarkHotKeyNow: one existing key, one goroutine, an explicit fixed
// instant (advancing for shardlimit's sliding log, see Stepper).
func BenchmarkHotKeyNow(b *testing.B) {
	each(b, append(atFactories(), OurResultFactories()...), Allowed, func(b *testing.B, k Keyed) {
		l := k.(AtKeyed)
		s := newNowSeq(l, time.Now(), 1, nil)
		l.AllowAt(hotKey, s.next())
		warm(l, hotKey, s)
		var denied int64
		b.ResetTimer()
		for range b.N {
			if !l.AllowAt(hotKey, s.next()) {
				denied++
			}
		}
		b.StopTimer()
		unexpected(b, l, denied, "denied")
	})
}

// BenchmarkHotKeyParallel: one existing key shared by GOMAXPROCS
// goroutines, Allow with the clock read.
func BenchmarkHotKeyParallel(b *testing.B) {
	each(b, Factories(), Allowed, func(b *testing.B, l Keyed) {
		prepare(l, hotKey)
		defer forget(l, hotKey)
		var denied atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			var d int64
			for pb.Next() {
				if !l.Allow(hotKey) {
					d++
				}
			}
			denied.Add(d)
		})
		b.StopTimer()
		unexpected(b, l, denied.Load(), "denied")
	})
}

// BenchmarkHotKeyNowParallel: BenchmarkHotKeyParallel with explicit
// instants.
func BenchmarkHotKeyNowParallel(b *testing.B) {
	each(b, atFactories(), Allowed, func(b *testing.B, k Keyed) {
		l := k.(AtKeyed)
		base := time.Now()
		procs := runtime.GOMAXPROCS(0)
		var shared atomic.Int64
		s := newNowSeq(l, base, 1, nil)
		l.AllowAt(hotKey, s.next())
		warm(l, hotKey, s)
		shared.Store(s.t)
		var denied atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			s := newNowSeq(l, base, procs, &shared)
			s.t = shared.Load()
			var d int64
			for pb.Next() {
				if !l.AllowAt(hotKey, s.next()) {
					d++
				}
			}
			denied.Add(d)
		})
		b.StopTimer()
		unexpected(b, l, denied.Load(), "denied")
	})
}

// held is the one populated limiter kept across the rounds (b.N values)
// of a many-key sub-benchmark, so that a million keys are inserted once
// per sub-benchmark run rather than once per round.
var held struct {
	name string
	l    Keyed
	bpk  float64
}

// dropHeld closes and forgets the held limiter.
func dropHeld() {
	if held.l != nil {
		held.l.Close()
	}
	held.name, held.l, held.bpk = "", nil, 0
	runtime.GC()
}

// holding returns the limiter held for this sub-benchmark and GOMAXPROCS,
// building it (and measuring its heap bytes per key) if needed.
func holding(b *testing.B, build func() Keyed) (Keyed, float64) {
	keys := float64(Million().Len())
	name := fmt.Sprintf("%s@%d", b.Name(), runtime.GOMAXPROCS(0))
	if held.name == name {
		return held.l, held.bpk
	}
	dropHeld()
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	l := build()
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m1)
	held.name, held.l = name, l
	held.bpk = (float64(m1.HeapAlloc) - float64(m0.HeapAlloc)) / keys
	return l, held.bpk
}

// populate inserts every key of ks into l with one request, each key a
// fresh copy as it would be when read from a request, so that a limiter
// that keeps the key pays for its bytes. Redis-backed limiters are not
// populated (a million round trips take too long); their keys are created
// by the benchmark itself.
func populate(l Keyed, ks *KeySet, at time.Time, useAt bool) {
	if _, ok := l.(*RedisRate); ok {
		return
	}
	for i := range ks.Len() {
		k := strings.Clone(ks.Key(i))
		if useAt {
			l.(AtKeyed).AllowAt(k, at)
		} else {
			l.Allow(k)
		}
	}
}

// manyKeys runs the million-key scenarios: each goroutine g of n walks the
// keys g, g+n, g+2n, ... of the populated limiter: in the order they were
// inserted, or, if shuffled, in a fixed random permutation of it.
func manyKeys(b *testing.B, fs []Factory, useAt, shuffled bool) {
	ks := Million()
	order := identityOrder(ks.Len())
	if shuffled {
		order = shuffledOrder(ks.Len())
	}
	defer dropHeld()
	base := time.Now()
	for _, f := range fs {
		b.Run(f.Name, func(b *testing.B) {
			l, _ := holding(b, func() Keyed {
				l := newLimiter(b, f, Allowed)
				populate(l, ks, base, useAt)
				return l
			})
			b.ReportAllocs()
			procs := runtime.GOMAXPROCS(0)
			n := ks.Len()
			var gid, denied atomic.Int64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(gid.Add(1)-1) % n
				var d int64
				if useAt {
					la := l.(AtKeyed)
					for pb.Next() {
						if !la.AllowAt(ks.Key(int(order[i])), base) {
							d++
						}
						if i += procs; i >= n {
							i -= n
						}
					}
				} else {
					for pb.Next() {
						if !l.Allow(ks.Key(int(order[i]))) {
							d++
						}
						if i += procs; i >= n {
							i -= n
						}
					}
				}
				denied.Add(d)
			})
			b.StopTimer()
			unexpected(b, l, denied.Load(), "denied")
		})
	}
}

// BenchmarkMillionKeysParallel: one million existing distinct keys,
// GOMAXPROCS goroutines, Allow with the clock read.
func BenchmarkMillionKeysParallel(b *testing.B) { manyKeys(b, Factories(), false, false) }

// BenchmarkMillionKeysNowParallel: BenchmarkMillionKeysParallel with an
// explicit fixed instant.
func BenchmarkMillionKeysNowParallel(b *testing.B) { manyKeys(b, atFactories(), true, false) }

// BenchmarkMillionKeysShuffledNowParallel: MillionKeysNowParallel with the
// keys visited in a random order instead of the order they were inserted
// in. Real traffic does not revisit keys in first-seen order; a limiter
// that allocates one object per key in insertion order gets sequential,
// prefetched memory from the in-order walk that it would not get here.
func BenchmarkMillionKeysShuffledNowParallel(b *testing.B) {
	manyKeys(b, atFactories(), true, true)
}

// BenchmarkMillionKeysShuffledParallel: MillionKeysParallel (Allow, the
// clock read) with the keys visited in random order.
func BenchmarkMillionKeysShuffledParallel(b *testing.B) {
	manyKeys(b, Factories(), false, true)
}

// identityOrder returns 0, 1, ..., n-1.
func identityOrder(n int) []int32 {
	o := make([]int32, n)
	for i := range o {
		o[i] = int32(i)
	}
	return o
}

// shuffledOrder returns a fixed random permutation of 0, 1, ..., n-1.
func shuffledOrder(n int) []int32 {
	o := identityOrder(n)
	r := rand.New(rand.NewPCG(7, 11))
	r.Shuffle(n, func(i, j int) { o[i], o[j] = o[j], o[i] })
	return o
}

// BenchmarkDenied: one key over its limit (one request per hour), Allow
// with the clock read: every timed decision denies.
func BenchmarkDenied(b *testing.B) {
	each(b, Factories(), Denied, func(b *testing.B, l Keyed) {
		start := time.Now()
		prepare(l, hotKey)
		defer forget(l, hotKey)
		var allowed int64
		b.ResetTimer()
		for range b.N {
			if l.Allow(hotKey) {
				allowed++
			}
		}
		b.StopTimer()
		// A window aligned to Unix time admits once more per boundary the
		// run crossed (about 1 run in 500 crosses the hour).
		allowed -= min(allowed, windowsCrossed(start, Denied.Window))
		unexpected(b, l, allowed, "allowed")
	})
}

// windowsCrossed returns how many boundaries of windows of length w
// aligned to Unix time passed from start until now.
func windowsCrossed(start time.Time, w time.Duration) int64 {
	return time.Now().UnixNano()/int64(w) - start.UnixNano()/int64(w)
}

// BenchmarkDeniedNow: BenchmarkDenied with an explicit fixed instant.
func BenchmarkDeniedNow(b *testing.B) {
	each(b, atFactories(), Denied, func(b *testing.B, k Keyed) {
		l := k.(AtKeyed)
		now := time.Now()
		l.AllowAt(hotKey, now)
		var allowed int64
		b.ResetTimer()
		for range b.N {
			if l.AllowAt(hotKey, now) {
				allowed++
			}
		}
		b.StopTimer()
		unexpected(b, l, allowed, "allowed")
	})
}

// BenchmarkBytesKey: BenchmarkHotKey with the key in a []byte, as a
// fasthttp handler has it. Limiters without a []byte API convert it.
func BenchmarkBytesKey(b *testing.B) {
	each(b, Factories(), Allowed, func(b *testing.B, l Keyed) {
		prepare(l, hotKey)
		defer forget(l, hotKey)
		key := []byte(hotKey)
		var denied int64
		b.ResetTimer()
		for range b.N {
			if !l.AllowBytes(key) {
				denied++
			}
		}
		b.StopTimer()
		unexpected(b, l, denied, "denied")
	})
}

// BenchmarkBytesKeyNow: BenchmarkHotKeyNow with the key in a []byte
// (shardlimit's AllowBytesN).
func BenchmarkBytesKeyNow(b *testing.B) {
	each(b, atFactories(), Allowed, func(b *testing.B, k Keyed) {
		l := k.(AtKeyed)
		key := []byte(hotKey)
		s := newNowSeq(l, time.Now(), 1, nil)
		l.AllowAt(hotKey, s.next())
		warm(l, hotKey, s)
		var denied int64
		b.ResetTimer()
		for range b.N {
			if !l.AllowBytesAt(key, s.next()) {
				denied++
			}
		}
		b.StopTimer()
		unexpected(b, l, denied, "denied")
	})
}

// gcLoop times forced collections with whatever is held, reporting the
// time per collection as gc-ns and bpk as B/key.
func gcLoop(b *testing.B, bpk float64) {
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		runtime.GC()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "gc-ns")
	b.ReportMetric(bpk, "B/key")
}

// BenchmarkMemory: after inserting one million distinct keys (one request
// each, keys copied as if read from requests), B/key is the growth of the
// live heap divided by a million; ns/op and gc-ns are the time of one
// forced runtime.GC() with that limiter held. "none" holds no limiter:
// its gc-ns is the baseline. shardlimit_sliding_log_full100 has a limit of
// 100 and every key's ring full (100 requests per key). redis_rate is
// skipped: its state lives in the Redis server, not in this process.
func BenchmarkMemory(b *testing.B) {
	ks := Million()
	defer dropHeld()
	b.Run("none", func(b *testing.B) {
		dropHeld()
		gcLoop(b, 0)
	})
	now := time.Now()
	for _, f := range Factories() {
		b.Run(f.Name, func(b *testing.B) {
			if f.Name == "redis_rate" {
				b.Skip("redis_rate keeps its state in the Redis server")
			}
			_, bpk := holding(b, func() Keyed {
				l := newLimiter(b, f, Allowed)
				populate(l, ks, now, false)
				return l
			})
			gcLoop(b, bpk)
		})
	}
	b.Run("shardlimit_sliding_log_full100", func(b *testing.B) {
		_, bpk := holding(b, func() Keyed {
			l, err := NewOurs(ourAlgorithms[1], Profile{Limit: 100, Window: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			fillLog(l, ks, now, 100)
			return l
		})
		gcLoop(b, bpk)
	})
}

// fillLog sends per requests for every key of ks to l, one millisecond
// apart, with GOMAXPROCS goroutines each filling its own share of the keys.
func fillLog(l *Ours, ks *KeySet, now time.Time, per int) {
	procs := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	for g := range procs {
		wg.Go(func() {
			for i := g; i < ks.Len(); i += procs {
				k := strings.Clone(ks.Key(i))
				for j := range per {
					l.Limiter().AllowN(k, now.Add(time.Duration(j)*time.Millisecond), 1)
				}
			}
		})
	}
	wg.Wait()
}
