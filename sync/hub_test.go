package sync

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	stdsync "sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// infoCalls returns how many INFO commands the Redis at addr has served
// (INFO commandstats, cmdstat_info calls), the one that asks included.
func infoCalls(t testing.TB, addr string) int64 {
	t.Helper()
	text, err := redistest.DoString(addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(text) {
		rest, ok := strings.CutPrefix(line, "cmdstat_info:calls=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n + 1 // INFO counts itself once it has answered
	}
	return 1
}

// idleCost is what n idle Shared and n idle Exact limiters on one client
// cost over d: CPU as a share of one core, INFO commands per second sent
// to the store, and the goroutines they added to those of one of each.
type idleCost struct {
	cpu, infoPerSec float64
	goroutines      int
	infos           int64
	elapsed         time.Duration
}

// measureIdle builds n Shared and n Exact limiters of a window with the
// default intervals on one client of a Redis of the test's own, leaves
// them idle for d, and measures them. They hold no key, so the process's
// janitor does not sweep them, and the hub neither visits them nor ticks
// for them: what is left is its eviction check.
func measureIdle(t testing.TB, n int, window, d time.Duration) idleCost {
	srv := redistest.StartServer(t)
	c := newClient(t, srv.Addr)
	cfg := shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 10, Window: window}
	build := func() {
		s, err := NewShared(c, SharedConfig{Config: cfg, Prefix: "idle:"})
		if err != nil {
			t.Fatal(err)
		}
		e, err := NewExact(c, ExactConfig{Config: cfg, Prefix: "idle:"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close(); _ = e.Close() })
	}
	build()
	settle := func() int {
		// What a call in flight started (go-redis's dial) ends first.
		time.Sleep(100 * time.Millisecond)
		return runtime.NumGoroutine()
	}
	base := settle()
	for range n - 1 {
		build()
	}
	grown := settle() - base
	info0, cpu0, t0 := infoCalls(t, srv.Addr), cpuTime(), time.Now()
	time.Sleep(d)
	info1, cpu1, t1 := infoCalls(t, srv.Addr), cpuTime(), time.Now()
	el := t1.Sub(t0)
	infos := info1 - info0 - 1 // the measuring INFO itself
	return idleCost{cpu: float64(cpu1-cpu0) / float64(el), infos: infos,
		infoPerSec: float64(infos) / el.Seconds(), goroutines: grown, elapsed: el}
}

// TestHubIdleCost: 1,000 idle Shared and 1,000 idle Exact limiters on one
// client add no goroutine to those of one of each, and send at most one
// INFO per second (counted by Redis) between them. The CPU they use is
// logged, not judged: it depends on the machine. SHARDLIMIT_IDLE_LIMITERS
// sets another count.
func TestHubIdleCost(t *testing.T) {
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("SHARDLIMIT_IDLE_LIMITERS")); err == nil && v > 0 {
		n = v
	}
	ic := measureIdle(t, n, time.Second, 3*time.Second)
	t.Logf("%d idle Shared + %d idle Exact on one client: %.2f%% of a core, %d INFO in %v (%.2f/s), %d goroutines more than one of each",
		n, n, 100*ic.cpu, ic.infos, ic.elapsed.Round(time.Millisecond), ic.infoPerSec, ic.goroutines)
	if ic.goroutines > 0 {
		t.Errorf("%d goroutines more for %d limiters than for one of each", ic.goroutines, n)
	}
	if float64(ic.infos) > ic.elapsed.Seconds()+1 {
		t.Errorf("%d INFO commands in %v: more than one per second", ic.infos, ic.elapsed)
	}
}

// BenchmarkHubIdle measures 1,000 and 10,000 idle Shared and Exact
// limiters (as many of each) on one client over 10 s, of a window of one
// second (the janitor sweeps each every second) and of one minute: CPU as
// a percentage of one core, INFO commands per second, and goroutines
// added to one of each. The b.N loop is empty: the metrics are what
// counts.
func BenchmarkHubIdle(b *testing.B) {
	for _, bc := range []struct {
		n      int
		window time.Duration
	}{{1000, time.Second}, {10000, time.Second}, {1000, time.Minute}, {10000, time.Minute}} {
		b.Run(fmt.Sprintf("limiters=%d/window=%v", bc.n, bc.window), func(b *testing.B) {
			ic := measureIdle(b, bc.n, bc.window, 10*time.Second)
			for range b.N {
			}
			b.ReportMetric(100*ic.cpu, "cpu%")
			b.ReportMetric(ic.infoPerSec, "info/s")
			b.ReportMetric(float64(ic.goroutines), "goroutines+")
		})
	}
}

// pipelineCounter is a go-redis hook that records the size of every
// pipeline of EVALSHA the client sends, in items (each script call carries
// one or more; not the EVAL that follows a NOSCRIPT, nor go-redis's
// connection handshake).
type pipelineCounter struct {
	mu    stdsync.Mutex
	sizes []int
}

func (p *pipelineCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (p *pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (p *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() == "evalsha" {
			items := 0
			for _, c := range cmds {
				// EVALSHA sha numkeys keys... and the ARGV of addScript
				args := c.Args()
				if n, ok := args[2].(int); ok && len(args) >= 3+n {
					argv := make([]string, 0, len(args)-3-n)
					for _, a := range args[3+n:] {
						argv = append(argv, fmt.Sprint(a))
					}
					nkeys := scriptItems(argv)
					items += len(nkeys)
				}
			}
			p.mu.Lock()
			p.sizes = append(p.sizes, items)
			p.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// TestHubFlushesTogether: the flushes of 40 Shared limiters on one client,
// each with one key decided, go out together: in pipelines of at most the
// smallest MaxBatch (10), at most a few rounds of them, not one pipeline
// per limiter.
func TestHubFlushesTogether(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newClient(t, srv.Addr)
	pc := &pipelineCounter{}
	c.AddHook(pc)
	const n = 40
	lims := make([]*Shared, n)
	for i := range lims {
		lims[i] = newShared(t, c, SharedConfig{
			Config:        shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 10, Window: time.Minute},
			FlushInterval: 200 * time.Millisecond, MaxBatch: 10 + i, EvictionCheck: -1})
	}
	for _, s := range lims {
		s.AllowN("k", at(time.Second), 1)
	}
	eventually(t, 10*time.Second, func() string {
		for i, s := range lims {
			if st := s.SharedStats(); st.SentUnits != 1 {
				return fmt.Sprintf("limiter %d: %+v", i, st)
			}
		}
		return ""
	})
	pc.mu.Lock()
	sizes := slices.Clone(pc.sizes)
	pc.mu.Unlock()
	t.Logf("%d items of %d limiters in %d pipelines of %v", n, n, len(sizes), sizes)
	total := 0
	for _, sz := range sizes {
		total += sz
		if sz > 10 {
			t.Errorf("a pipeline of %d items, above the smallest MaxBatch 10", sz)
		}
	}
	// The limiters' decisions may straddle a tick or two (a loaded
	// machine), never one pipeline per limiter.
	if total != n || len(sizes) > 3*n/10 {
		t.Errorf("%d items in %d pipelines %v: want %d in at most %d", total, len(sizes), sizes, n, 3*n/10)
	}
}

// snapshot returns the hub's rounds and a copy of its visit counts.
func (v *visitLog) snapshot() (uint64, map[any]uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := make(map[any]uint64, len(v.n))
	for k, c := range v.n {
		n[k] = c
	}
	return v.rounds, n
}

// TestHubVisitsNoIdleLimiter: a hub's rounds do not visit limiters with
// nothing to do, and do not tick for them. Visits are counted, not timed:
// once every limiter has cooled down the FlushInterval's tick is stopped;
// a decision on one Shared and one Exact limiter has exactly those two
// visited (the Shared one's unit flushed through the restarted tick), and
// they cool down again; while a witness keeps the tick going, K rounds
// visit none of the idle limiters.
func TestHubVisitsNoIdleLimiter(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newClient(t, srv.Addr)
	const n, K = 20, 20
	cfg := shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 10, Window: time.Minute}
	shared := make([]*Shared, n)
	exact := make([]*Exact, n)
	for i := range n {
		shared[i] = newShared(t, c, SharedConfig{Config: cfg, FlushInterval: 5 * time.Millisecond,
			HealthInterval: 20 * time.Millisecond, EvictionCheck: -1})
		exact[i] = newExact(t, c, ExactConfig{Config: cfg, HealthInterval: 20 * time.Millisecond, EvictionCheck: -1})
	}
	h := shared[0].hub
	if exact[0].hub != h {
		t.Fatal("Shared and Exact on one client have two hubs")
	}
	log := &visitLog{n: make(map[any]uint64)}
	h.visits.Store(log)
	cooled := func() string {
		for i := range n {
			if shared[i].active.Load() || exact[i].hot.Load() {
				return fmt.Sprintf("limiter %d still visited", i)
			}
		}
		h.actMu.Lock()
		defer h.actMu.Unlock()
		if !h.idleIv[5*time.Millisecond] {
			return "the tick of idle limiters still runs"
		}
		return ""
	}
	eventually(t, 30*time.Second, cooled)
	_, v0 := log.snapshot()

	// One decision each on shared[3] and exact[5]: exactly those are
	// visited, until they cool down.
	s, e := shared[3], exact[5]
	if !s.AllowN("k", at(time.Second), 1).Allowed || !e.AllowN("k", at(time.Second), 1).Allowed {
		t.Fatal("denied")
	}
	eventually(t, 30*time.Second, func() string {
		if st := s.SharedStats(); st.SentUnits != 1 {
			return fmt.Sprintf("the unit decided was not flushed: %+v", st)
		}
		if _, v := log.snapshot(); v[s] == v0[s] || v[e] == v0[e] {
			return fmt.Sprintf("Shared visited %d times, Exact %d times", v[s]-v0[s], v[e]-v0[e])
		}
		return ""
	})
	eventually(t, 30*time.Second, cooled)
	_, v1 := log.snapshot()
	for l, c := range v1 {
		if l != any(s) && l != any(e) && c != v0[l] {
			t.Fatalf("a decision on two limiters had another visited %d times", c-v0[l])
		}
	}

	// A witness decided in every poll keeps the tick going: K rounds
	// visit it and none of the idle limiters.
	wcfg := cfg
	wcfg.Limit = shardlimit.MaxLimit
	w := newShared(t, c, SharedConfig{Config: wcfg, FlushInterval: 5 * time.Millisecond, EvictionCheck: -1})
	onlyWitnessVisited(t, log, w, K)
}

// onlyWitnessVisited decides on w until its hub has run k rounds more,
// and fails if those rounds visited any other limiter.
func onlyWitnessVisited(t *testing.T, log *visitLog, w *Shared, k uint64) {
	t.Helper()
	r0, v0 := log.snapshot()
	eventually(t, 30*time.Second, func() string {
		w.AllowN("w", at(time.Second), 1)
		if r, _ := log.snapshot(); r < r0+k {
			return fmt.Sprintf("%d rounds of %d", r-r0, k)
		}
		return ""
	})
	r1, v1 := log.snapshot()
	for l, c := range v1 {
		if l != any(w) && c != v0[l] {
			t.Fatalf("%d rounds visited an idle limiter %d times", r1-r0, c-v0[l])
		}
	}
	if v1[w] == 0 {
		t.Fatal("the witness was never visited")
	}
}

// TestHubRestartsStoppedTick: decisions that race with the hub stopping
// their FlushInterval's tick are never left unflushed. Eight limiters
// decide at once, round after round, half the rounds right after their
// tick stopped and half while it may be stopping; each round waits until
// every unit has been sent. The hub has no other reason to wake (no
// eviction check): a lost wake-up leaves a unit unsent, and the test
// fails at its deadline.
func TestHubRestartsStoppedTick(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newClient(t, srv.Addr)
	const n, rounds = 8, 60
	cfg := shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: shardlimit.MaxLimit, Window: time.Minute}
	lims := make([]*Shared, n)
	for i := range lims {
		lims[i] = newShared(t, c, SharedConfig{Config: cfg, FlushInterval: time.Millisecond,
			HealthInterval: time.Millisecond, EvictionCheck: -1})
	}
	h := lims[0].hub
	stopped := func() string {
		h.actMu.Lock()
		defer h.actMu.Unlock()
		if !h.idleIv[time.Millisecond] {
			return "the tick still runs"
		}
		return ""
	}
	for r := range rounds {
		if r%2 == 0 {
			eventually(t, 30*time.Second, stopped)
		}
		var wg stdsync.WaitGroup
		for _, s := range lims {
			wg.Go(func() { s.AllowN("k", at(time.Second), 1) })
		}
		wg.Wait()
		eventually(t, 30*time.Second, func() string {
			for i, s := range lims {
				if st := s.SharedStats(); st.SentUnits != uint64(r+1) {
					return fmt.Sprintf("round %d: limiter %d sent %d units of %d", r, i, st.SentUnits, r+1)
				}
			}
			return ""
		})
	}
}
