package sync

import (
	"context"
	"fmt"
	"strings"
	stdsync "sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// Outage tests of Exact (issue 21): two nodes (two limiters, one client
// each, so two background goroutines) share a private Redis; the store
// fails; what each node admits while it decides by its fallback reaches
// the store when it answers again, so a window never admits more than
// the documented bound
//
//	max(L, U + sum_i max(0, F - max(u_i, ceil(c_i*F/L))))
//
// (U = sum_i u_i the units Redis granted node i before the fault, c_i
// the units Redis counted for all nodes at node i's last decision, F the
// fallback's limit): N*L with the default fallback, L with F = L/N. The
// scripts decide at the test's instants (callerTime), all in one window,
// so the counts depend only on what was sent.

// outageNode is one node of an outage test.
type outageNode struct {
	e  *Exact
	ch changes
}

// outageFault is a store fault: begin starts it, end ends it.
type outageFault struct {
	name       string
	addr       func(t *testing.T) string // the address the nodes dial
	begin, end func(t *testing.T)
	lost       bool // the store loses the nodes' state
	// The nodes notice the fault without deciding (the eviction check):
	// the test sends nothing until they do.
	noticed bool
}

// newOutageNodes returns two nodes of cfg on addr, each with a fallback of
// limits fb (nil: the default, cfg's limits), their INFO baseline read.
func newOutageNodes(t *testing.T, addr, prefix string, cfg shardlimit.Config, fb []int) [2]*outageNode {
	t.Helper()
	var nodes [2]*outageNode
	for i := range nodes {
		n := &outageNode{ch: newChanges()}
		xc := ExactConfig{
			Config: cfg, Prefix: prefix,
			Timeout: 300 * time.Millisecond, DegradeAfter: time.Nanosecond,
			ProbeInterval: 10 * time.Millisecond, MaxProbeInterval: 100 * time.Millisecond,
			EvictionCheck: time.Millisecond, OnStateChange: n.ch.record,
		}
		if fb != nil {
			fc := cfg
			fc.Limit, fc.Rates = fb[0], nil
			if len(cfg.Rates) > 0 {
				fc.Limit = 0
				for k, r := range cfg.Rates {
					fc.Rates = append(fc.Rates, rate(fb[k], r.Window))
				}
			}
			l, err := shardlimit.New(fc)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			xc.Fallback = l
		}
		n.e = newExact(t, newClient(t, addr), xc)
		n.e.callerTime = true
		nodes[i] = n
	}
	// The store's identity read before the fault, to tell a restart.
	deadline := time.Now().Add(10 * time.Second)
	for _, n := range nodes {
		for n.e.ExactStats().Eviction.Policy == "" {
			if time.Now().After(deadline) {
				t.Fatal("no INFO read within 10 s")
			}
			time.Sleep(5 * time.Millisecond) // no event: the hub's first check
		}
	}
	return nodes
}

// send makes count decisions of key at now on e and returns how many were
// admitted, failing the test on an error.
func send(t *testing.T, e *Exact, key string, now time.Time, count int) int {
	t.Helper()
	got := 0
	for range count {
		r := e.AllowN(key, now, 1)
		if r.Err != nil {
			t.Fatalf("decision: %v", r.Err)
		}
		if r.Allowed {
			got++
		}
	}
	return got
}

// untilDegraded makes decisions of key at now on n until one of them
// fails (at most limit of them, and 30 s), then waits for n to report
// Degraded: from its first failed call on, n decides by its policy, and
// the hub's checks of the store, failing too, degrade it. It returns how
// many decisions it made and admitted.
func untilDegraded(t *testing.T, n *outageNode, key string, now time.Time, limit int) (sent, admitted int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for errs := n.e.ExactStats().Errors; n.e.ExactStats().Errors == errs; {
		if sent == limit || time.Now().After(deadline) {
			t.Fatalf("no failed call after %d decisions: %+v", sent, n.e.ExactStats())
		}
		admitted += send(t, n.e, key, now, 1)
		sent++
	}
	n.ch.wait(t, Degraded, 30*time.Second)
	return sent, admitted
}

// runOutage runs the two-node scenario of cfg (limits lims, fallback
// limits fb or nil) through fault f and checks the window's admissions
// against the bound.
func runOutage(t *testing.T, f outageFault, cfg shardlimit.Config, lims, fb []int, sends int) {
	prefix := redistest.Prefix(t)
	nodes := newOutageNodes(t, f.addr(t), prefix, cfg, fb)
	const key = "user"
	now := at(time.Second)
	L, F := lims[0], lims[0] // the binding (first, shortest) rate's
	if fb != nil {
		F = fb[0]
	}
	// Before the fault: Redis grants u_i, node 0 first: c_0 = u_0, c_1 = U.
	u := [2]int{6, 4}
	var c [2]int
	U := 0
	for i, n := range nodes {
		if got := send(t, n.e, key, now, u[i]); got != u[i] {
			t.Fatalf("node %d: Redis admitted %d of %d", i, got, u[i])
		}
		U += u[i]
		c[i] = U
	}
	f.begin(t)
	// The fault: each node decides by its fallback from its first failed
	// call on; sends decisions each (more if it took more to notice).
	fsum, bound := 0, U
	for i, n := range nodes {
		sent, got := 0, 0
		if f.noticed {
			n.ch.wait(t, Degraded, 30*time.Second)
		} else {
			sent, got = untilDegraded(t, n, key, now, 25)
		}
		got += send(t, n.e, key, now, max(0, sends-sent))
		want := max(0, F-max(u[i], ceilShare(c[i], F, L)))
		if got > want {
			t.Errorf("node %d admitted %d by its fallback, more than F - max(u_i, ceil(c_i*F/L)) = %d", i, got, want)
		}
		fsum += got
		bound += want
	}
	f.end(t)
	for i, n := range nodes {
		n.ch.wait(t, Healthy, 30*time.Second)
		if st := n.e.ExactStats(); st.Replays == 0 || st.ReplayFailures != 0 && st.Replayed == 0 {
			t.Errorf("node %d: no replay: %+v", i, st)
		}
	}
	// After: the store counts every unit; 25 more decisions each.
	after := 0
	for _, n := range nodes {
		after += send(t, n.e, key, now, 25)
	}
	total := U + fsum + after
	bound = max(L, bound)
	t.Logf("%s: U = %d, by the fallbacks %d, after %d: %d admitted, bound %d (L = %d, F = %d)", f.name, U, fsum, after, total, bound, L, F)
	if total > bound {
		t.Errorf("%d admitted in the window, bound max(L, U + sum max(0, F - max(u_i, ceil(c_i*F/L)))) = %d", total, bound)
	}
	// A store grant made from state a reply proved lost stays counted
	// while the policy decides that request again (the strict side): with
	// a loss proved, fewer may be admitted after, never more.
	losses := uint64(0)
	for _, n := range nodes {
		losses += n.e.ExactStats().Losses
	}
	if want := max(0, L-U-fsum); after > want || losses == 0 && after != want {
		t.Errorf("after the fault %d admitted, want L - U - fallback units = %d (losses proved: %d)", after, want, losses)
	}
	if f.lost && losses != 0 {
		// Each node replayed its journal after INFO showed the loss and
		// forgot the states it had seen: the states born since are not
		// proof of a loss again (a second replay would count it twice).
		t.Errorf("%d losses proved by replies after the nodes replayed every unit", losses)
	}
	if fb == nil && total > 2*L {
		t.Errorf("%d admitted, more than N*L = %d", total, 2*L)
	}
}

// ceilShare returns ceil(c*F/L), a node's share of c units the cluster
// used of a limit L, for its fallback limit F.
func ceilShare(c, F, L int) int {
	return (c*F + L - 1) / L
}

// outageConfigs are the limiters the outage tests run: each algorithm
// with one rate of 20 per hour, and a fixed window of two rates; some
// send enough during the fault to reach the bound, the others leave room
// that the store must count exactly afterwards.
var outageConfigs = []struct {
	name  string
	cfg   shardlimit.Config
	lims  []int
	half  []int // F = L/N
	sends int   // decisions per node during the fault
}{
	{"fixed", ratesCfg(shardlimit.FixedWindow, 0, rate(20, time.Hour)), []int{20}, []int{10}, 25},
	{"counter", ratesCfg(shardlimit.SlidingCounter, 6, rate(20, time.Hour)), []int{20}, []int{10}, 25},
	{"gcra", ratesCfg(shardlimit.GCRA, 0, rate(20, time.Hour)), []int{20}, []int{10}, 3},
	{"fixed-two-rates", ratesCfg(shardlimit.FixedWindow, 0, rate(20, time.Hour), rate(30, 24*time.Hour)), []int{20, 30}, []int{10, 15}, 3},
}

// eachOutage runs every configuration, with the default fallback and
// with F = L/N, through the fault mk builds (a fresh store each).
func eachOutage(t *testing.T, mk func(t *testing.T) outageFault) {
	for _, c := range outageConfigs {
		for _, half := range []bool{false, true} {
			name := c.name + "/default-fallback"
			fb := []int(nil)
			if half {
				name, fb = c.name+"/fallback-L/N", c.half
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel() // each has its own redis-server; the verdicts are counts
				runOutage(t, mk(t), c.cfg, c.lims, fb, c.sends)
			})
		}
	}
}

// TestExactOutageKillRestartEmpty: the store is killed (SIGKILL) and
// restarted empty. The nodes see refused connections, decide by their
// fallbacks, and on the store's return find a new run_id: each replays
// every unit it was granted before it decides by Redis again.
func TestExactOutageKillRestartEmpty(t *testing.T) {
	eachOutage(t, func(t *testing.T) outageFault {
		srv := redistest.StartServer(t)
		return outageFault{
			name:  "kill, empty restart",
			addr:  func(*testing.T) string { return srv.Addr },
			begin: func(*testing.T) { srv.Stop() },
			end:   func(*testing.T) { srv.Start() },
			lost:  true,
		}
	})
}

// TestExactOutageStalledProxy: the store stops answering (a proxy that
// swallows every byte): calls time out, the nodes decide by their
// fallbacks, and when the proxy passes again each sends what its
// fallback admitted (the store kept the rest: same run_id).
func TestExactOutageStalledProxy(t *testing.T) {
	eachOutage(t, func(t *testing.T) outageFault {
		srv := redistest.StartServer(t)
		p := redistest.StartProxy(t, srv.Addr)
		return outageFault{
			name:  "stalled proxy",
			addr:  func(*testing.T) string { return p.Addr },
			begin: func(*testing.T) { p.SetMode(redistest.Blackhole) },
			end:   func(*testing.T) { p.SetMode(redistest.Pass) },
		}
	})
}

// TestExactOutageEviction: a Redis of 2 MB with allkeys-lru flooded with
// other keys until the nodes' state is evicted. The nodes notice the
// evictions (INFO), decide by their fallbacks while they last, and when
// they stop replay every unit: the evicted state comes back.
func TestExactOutageEviction(t *testing.T) {
	eachOutage(t, func(t *testing.T) outageFault {
		srv := redistest.StartServer(t, "--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru")
		c := newClient(t, srv.Addr)
		var stop chan struct{}
		var wg stdsync.WaitGroup
		return outageFault{
			name: "eviction flood",
			addr: func(*testing.T) string { return srv.Addr },
			begin: func(t *testing.T) {
				floodUntilEvicted(t, c)
				// Keep evicting until the test has run the fault's
				// decisions, so no node sees the evictions end early.
				stop = make(chan struct{})
				wg.Add(1)
				go func() {
					defer wg.Done()
					floodUntil(c, stop)
				}()
			},
			end: func(t *testing.T) {
				close(stop)
				wg.Wait()
				if err := c.ConfigSet(context.Background(), "maxmemory", "0").Err(); err != nil {
					t.Fatal(err)
				}
			},
			lost:    true,
			noticed: true,
		}
	})
}

// floodUntilEvicted writes junk keys to c's Redis until every key of the
// test's limiters (prefix "test:") is evicted, at most 20,000 of them.
func floodUntilEvicted(t *testing.T, c *redis.Client) {
	t.Helper()
	ctx := context.Background()
	val := strings.Repeat("x", 4096)
	for i := 0; i < 20_000; i += 100 {
		pipe := c.Pipeline()
		for j := i; j < i+100; j++ {
			pipe.Set(ctx, fmt.Sprintf("junk:%d", j), val, time.Hour)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		keys, err := c.Keys(ctx, "*{user}*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 0 {
			return
		}
	}
	t.Fatal("the limiters' state survived 20,000 junk keys")
}

// floodUntil writes junk keys to c's Redis until stop is closed.
func floodUntil(c *redis.Client, stop chan struct{}) {
	ctx := context.Background()
	val := strings.Repeat("y", 4096)
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		_ = c.Set(ctx, fmt.Sprintf("junk2:%d", i), val, time.Hour).Err()
		if i%50 == 0 {
			time.Sleep(time.Millisecond) // pace: the store also serves the nodes
		}
	}
}

// TestExactOutageUneven: traffic spread unevenly before the fault. Node 0
// is granted 18 of L = 20, node 1 only 2 (its last decision after node
// 0's last), each with a fallback of F = L/N = 10. Each node's fallback
// holds at least its share of the cluster's usage, ceil(c*F/L), not only
// its own units: node 1's holds 10, not 2, so neither admits more while
// the store is away and the window holds at most L (with only its own
// units recorded, node 1 would admit 8 more: 28). Every algorithm, and
// both a kill with an empty restart and a stalled proxy.
func TestExactOutageUneven(t *testing.T) {
	faults := []struct {
		name string
		mk   func(t *testing.T) outageFault
	}{
		{"kill", func(t *testing.T) outageFault {
			srv := redistest.StartServer(t)
			return outageFault{addr: func(*testing.T) string { return srv.Addr },
				begin: func(*testing.T) { srv.Stop() }, end: func(*testing.T) { srv.Start() }}
		}},
		{"stall", func(t *testing.T) outageFault {
			srv := redistest.StartServer(t)
			p := redistest.StartProxy(t, srv.Addr)
			return outageFault{addr: func(*testing.T) string { return p.Addr },
				begin: func(*testing.T) { p.SetMode(redistest.Blackhole) },
				end:   func(*testing.T) { p.SetMode(redistest.Pass) }}
		}},
	}
	for _, f := range faults {
		for _, c := range outageConfigs {
			t.Run(f.name+"/"+c.name, func(t *testing.T) {
				runUneven(t, f.mk(t), c.cfg, c.lims[0], c.half)
			})
		}
	}
}

// runUneven runs TestExactOutageUneven's scenario through fault f: the
// binding rate's limit L, the fallback's limits half (L/N first).
func runUneven(t *testing.T, f outageFault, cfg shardlimit.Config, L int, half []int) {
	nodes := newOutageNodes(t, f.addr(t), redistest.Prefix(t), cfg, half)
	const key = "user"
	now := at(time.Second)
	// Before the fault: node 0 most of the window, node 1 last.
	plan := []struct{ node, count int }{{0, 14}, {1, 1}, {0, 4}, {1, 1}}
	U := 0
	for _, p := range plan {
		if got := send(t, nodes[p.node].e, key, now, p.count); got != p.count {
			t.Fatalf("node %d: Redis admitted %d of %d", p.node, got, p.count)
		}
		U += p.count
	}
	f.begin(t)
	fsum := 0
	for i, n := range nodes {
		sent, got := untilDegraded(t, n, key, now, 25)
		got += send(t, n.e, key, now, max(0, 25-sent))
		t.Logf("node %d admitted %d by its fallback", i, got)
		fsum += got
	}
	f.end(t)
	// Every node replays before any decides by Redis again: a node that
	// decides while another has not replayed may be granted the other's
	// units (see the package doc on processes that recover one by one).
	for _, n := range nodes {
		n.ch.wait(t, Healthy, 30*time.Second)
	}
	after := 0
	for _, n := range nodes {
		after += send(t, n.e, key, now, 25)
	}
	total := U + fsum + after
	t.Logf("U = %d, by the fallbacks %d, after %d: %d admitted (L = %d, F = %d)", U, fsum, after, total, L, half[0])
	if total > L {
		t.Errorf("%d admitted in the window, more than L = %d", total, L)
	}
}

// TestExactShortRestart: the store is killed and restarted empty before
// the failures last DegradeAfter (a minute here), so the limiter does not
// turn Degraded by an outage. Redis granted the whole limit L before the
// kill; one call fails; from it on the limiter decides by its fallback
// until its background goroutine has read INFO (a new run_id) and
// replayed the journal, so no call reaches the empty store before it
// counts those units: the window holds L, whenever the background
// goroutine runs. (Before, the first calls to reach the restarted store
// were decided from empty state: L + 2 and more.) Every algorithm, one
// rate and two.
func TestExactShortRestart(t *testing.T) {
	for _, c := range outageConfigs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // each has its own redis-server; the verdicts are counts
			srv := redistest.StartServer(t)
			e := newExact(t, newClient(t, srv.Addr), ExactConfig{
				Config: c.cfg, Prefix: redistest.Prefix(t),
				Timeout: 300 * time.Millisecond, DegradeAfter: time.Minute, HealthInterval: time.Hour,
				ProbeInterval: 10 * time.Millisecond, MaxProbeInterval: 100 * time.Millisecond,
			})
			e.callerTime = true
			const key = "user"
			now := at(time.Second)
			L := c.lims[0]
			if got := send(t, e, key, now, L); got != L {
				t.Fatalf("Redis admitted %d of %d", got, L)
			}
			srv.Stop()
			got := send(t, e, key, now, 1)
			if st := e.ExactStats(); st.Errors != 1 || st.State != Healthy {
				t.Fatalf("after the kill: want one failed call and Healthy: %+v", st)
			}
			srv.Start()
			got += send(t, e, key, now, 25)
			st := e.ExactStats()
			t.Logf("%d admitted after the kill; %+v", got, st)
			if got != 0 {
				t.Errorf("%d admitted after a restart, the window held L = %d already", got, L)
			}
		})
	}
}
