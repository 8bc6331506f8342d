package sync

import (
	"cmp"
	"fmt"
	"slices"
	stdsync "sync"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// offsetClock is the real clock moved by a constant: real time passes, but
// the test picks where the windows start.
type offsetClock struct{ off time.Duration }

func (c offsetClock) Now() time.Time { return time.Now().Add(c.off) }

// arrival is one request of the pacer's schedule.
type arrival struct {
	at  time.Duration // after the run's start
	key int
}

// issued is one request as the pacer made it.
type issued struct {
	at      time.Time // the instant passed to AllowN
	key     int
	allowed bool
	// exhausted is, for a denial, the window of the rate the deciding
	// node saw exhausted (the binding rate, Result.Window, with nothing
	// remaining); 0 otherwise.
	exhausted time.Duration
}

// keyClass is a set of keys of one set of limits offered one load.
type keyClass struct {
	name   string
	limits []int   // per rate of its suite (SetLimits on every node)
	perSec float64 // units offered per second, all nodes together
	keys   int
	tight  bool // at most 1.05x when the nodes keep to their schedule
}

// suite is a limiter configuration and the keys it is offered.
type suite struct {
	name    string
	rates   []shardlimit.Rate // the limits are replaced per key by its class's
	classes []keyClass
}

// TestSharedAccuracy is the multi-node accuracy test (issues 4, 11 and 13):
// 4 Shared limiters (one go-redis client each) share one Redis, flush every
// 50 ms, and are driven by an open-loop pacer on the real clock: per node
// and key, requests at fixed instants whatever the answers, AllowN at the
// instant the request is actually made. The harness, not the library,
// counts the admitted units per key and window. Limiters of one rate, a
// window of 10 s: busy keys (limit 1000) are offered 2x and 1.2x the limit;
// low-rate keys (limit 20, offered 2x: one request a second per node, so
// R*T = 0.05, a node decides such a key once every 20 flushes) would,
// without the near-limit reads, decide on a view as old as their last
// decision and admit up to a unit per other node over the limit. Limiters
// of two rates, per second and per 10 s (issue 13): busy keys (100 per
// second and 600 per 10 s, offered 200 per second: the second's rate binds
// for 6 s, then the 10 s rate) and low-rate keys (4 per second and 20 per
// 10 s, offered 8 per second, 2 per node). For the fixed window and the
// sliding counter (10 buckets; windows counted on bucket boundaries, where
// the algorithm's own guarantee is exact), for every key and each of its
// rates:
//
//   - the largest admitted/limit never exceeds L + P, P the most requests
//     the other nodes were offered (together) in an interval of length
//     D = 2(T + d), T the longest time between two flushes of a node
//     (SharedStats.MaxFlushGap: the interval, stretched on a loaded
//     machine) and d the largest flush latency the nodes measured
//     (SharedStats.MaxLatency): a node near its limit sees the others at
//     most D late. P is at most the sync doc's (N-1)*R*D; for the one-rate
//     low-rate keys, whose requests come 250 ms apart over all nodes, it is
//     1 while D stays below 250 ms (without the near-limit reads they
//     admitted L + 3: each other node's last unit unseen);
//   - busy keys of one rate at 2x admit at most 1.05x when the nodes kept
//     to their schedule (T at most twice the interval, d at most one, and
//     no request made more than an interval after its instant: a pacer
//     that fell behind offers the others' requests in bursts, which the
//     bound above accounts for and 1.05x does not);
//   - every key admits at least 0.95x each limit in the run's first window
//     of it (no double counting) when a node denied one of its requests in
//     that window because that limit was exhausted: a node's view of a
//     window never holds more than was admitted in it, so such a denial
//     means the limit was reached. Whether a limit is reached in its first
//     window depends on what the pacer managed to send in it (and, with
//     two rates, on the other rate), so the check is skipped, and logged,
//     where none was.
//
// The windows are aligned to the run by an offset clock, so one full window
// of 10 s takes 10 s of real time; the four runs (two algorithms, one and
// two rates) run at once.
func TestSharedAccuracy(t *testing.T) {
	t.Parallel()
	const (
		nodes    = 4
		window   = 10 * time.Second // the longest; the run's length
		buckets  = 10
		interval = 50 * time.Millisecond
		lead     = 200 * time.Millisecond
	)
	suites := []suite{
		{name: "one rate", rates: []shardlimit.Rate{{Limit: 1000, Window: window}}, classes: []keyClass{
			{name: "busy", limits: []int{1000}, perSec: 200, keys: 4, tight: true},
			{name: "busy", limits: []int{1000}, perSec: 120, keys: 4},
			{name: "low rate", limits: []int{20}, perSec: 4, keys: 4},
		}},
		{name: "two rates", rates: []shardlimit.Rate{{Limit: 100, Window: time.Second}, {Limit: 600, Window: window}}, classes: []keyClass{
			{name: "busy", limits: []int{100, 600}, perSec: 200, keys: 4},
			{name: "low rate", limits: []int{4, 20}, perSec: 8, keys: 4},
		}},
	}
	addr := redistest.RequireRedis(t)

	// The run starts on a window boundary of the offset clock.
	now := time.Now()
	start := now.Add(lead)
	boundary := (start.UnixNano()/int64(window) + 1) * int64(window)
	clock := offsetClock{off: time.Duration(boundary - start.UnixNano())}
	origin := time.Unix(0, boundary) // the run's start on the offset clock

	type result struct {
		suite *suite
		alg   shardlimit.Algorithm
		keys  []keyClass // by key
		lims  [nodes]*Shared
		log   [nodes][]issued
		late  [nodes]time.Duration // the latest request after its instant
	}
	var results []*result
	var wg stdsync.WaitGroup
	for si := range suites {
		su := &suites[si]
		var keyClasses []keyClass // by key
		for _, c := range su.classes {
			for range c.keys {
				keyClasses = append(keyClasses, c)
			}
		}
		nkeys := len(keyClasses)
		// Per node, the arrival instants of every key: key k is offered
		// perSec units a second by all nodes together, evenly spaced, each
		// node shifted by a fraction of the spacing.
		schedule := make([][]arrival, nodes)
		for n := range nodes {
			for k, c := range keyClasses {
				gap := time.Duration(float64(time.Second) * nodes / c.perSec)
				// Node n's first request at (n + k/nkeys) / nodes of the
				// spacing: the nodes take turns, keys differ in phase.
				first := gap * time.Duration(n*nkeys+k) / time.Duration(nodes*nkeys)
				for at := first; at < window; at += gap {
					schedule[n] = append(schedule[n], arrival{at: at, key: k})
				}
			}
			slices.SortFunc(schedule[n], func(a, b arrival) int { return cmp.Compare(a.at, b.at) })
		}
		for _, alg := range []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingCounter} {
			res := &result{suite: su, alg: alg, keys: keyClasses}
			results = append(results, res)
			prefix := redistest.Prefix(t) + fmt.Sprintf("%s:%d:", alg, len(su.rates))
			for n := range nodes {
				res.lims[n] = newShared(t, newClient(t, addr), SharedConfig{
					Config: shardlimit.Config{Algorithm: alg, Rates: su.rates, Buckets: buckets,
						Clock: clock, JanitorInterval: -1},
					Prefix:        prefix,
					FlushInterval: interval,
					// Not DefaultFlushTimeout's 1 s: a loaded machine
					// under -race made flushes that long, the items of a
					// flush cut short are errors and their units unknown,
					// and what is measured here is how far the nodes'
					// views lag, which D accounts for (d, the latency).
					FlushTimeout: 10 * time.Second,
				})
				for k, c := range keyClasses {
					if err := res.lims[n].SetLimits(keyName(k), c.limits...); err != nil {
						t.Fatal(err)
					}
				}
			}
			for n := range nodes {
				wg.Go(func() {
					s := res.lims[n]
					out := make([]issued, 0, len(schedule[n]))
					var late time.Duration
					for _, a := range schedule[n] {
						if d := time.Until(origin.Add(a.at - clock.off)); d > 0 {
							time.Sleep(d)
						}
						at := clock.Now()
						late = max(late, at.Sub(origin.Add(a.at)))
						r := s.AllowN(keyName(a.key), at, 1)
						if r.Err != nil {
							t.Errorf("%v node %d: %v", alg, n, r.Err)
							return
						}
						is := issued{at: at, key: a.key, allowed: r.Allowed}
						if !r.Allowed && r.Remaining == 0 {
							is.exhausted = r.Window
						}
						out = append(out, is)
					}
					res.log[n], res.late[n] = out, late
				})
			}
		}
	}
	wg.Wait()
	for _, res := range results {
		var d, gap time.Duration
		late := slices.Max(res.late[:])
		near := 0
		for _, s := range res.lims {
			st := s.SharedStats()
			d = max(d, st.MaxLatency)
			gap = max(gap, st.MaxFlushGap)
			near = max(near, st.NearKeys)
			if st.ItemErrors != 0 || st.State != Healthy {
				t.Errorf("%v, %s: stats %+v", res.alg, res.suite.name, st)
			}
		}
		delay := 2 * (max(gap, interval) + d)
		nominal := gap <= 2*interval && d <= interval && late <= interval
		t.Run(res.alg.String()+"/"+res.suite.name, func(t *testing.T) {
			t.Logf("D = 2(T + d) = 2(%v + %v) = %v (flush interval %v); the latest request %v after its instant", max(gap, interval), d, delay, interval, late)
			if !nominal {
				t.Logf("the nodes fell behind their schedule: the 1.05x check is skipped, the bound holds it")
			}
			for ri, rate := range res.suite.rates {
				a := accuracy{nodes: nodes, window: rate.Window, buckets: buckets,
					origin: origin, delay: delay, log: res.log[:]}
				if res.alg == shardlimit.FixedWindow {
					a.buckets = 1
				}
				for k, c := range res.keys {
					lim := c.limits[ri]
					admitted, full, reached, others, r := a.measure(k)
					bound := lim + others
					offered := c.perSec * rate.Window.Seconds() / float64(lim)
					t.Logf("%s (%s, limit %d per %v, offered %.1fx): max admitted/limit %.4f (%d; first window %d), bound %.4f (L + %d; (N-1)RD = %.1f)",
						keyName(k), c.name, lim, rate.Window, offered, float64(admitted)/float64(lim), admitted, full,
						float64(bound)/float64(lim), others, (nodes-1)*r*delay.Seconds())
					if admitted > bound {
						t.Errorf("%s, rate %d per %v: %d admitted in one window, above the bound %d", keyName(k), lim, rate.Window, admitted, bound)
					}
					if nominal && c.tight && float64(admitted) > 1.05*float64(lim) {
						t.Errorf("%s offered %.1fx: %d admitted in one window, above 1.05x the limit", keyName(k), offered, admitted)
					}
					switch {
					case !reached:
						t.Logf("%s, rate %d per %v: no request was denied for this limit in the run's first window: the 0.95x check is skipped", keyName(k), lim, rate.Window)
					case float64(full) < 0.95*float64(lim):
						t.Errorf("%s, rate %d per %v, offered %.1fx: %d admitted in the run's first window, below 0.95x the limit a denial in it found reached", keyName(k), lim, rate.Window, offered, full)
					}
				}
			}
			t.Logf("near-limit keys read at a flush: at most %d", near)
		})
	}
}

func keyName(k int) string { return fmt.Sprintf("key%d", k) }

// accuracy measures what the nodes of one run admitted.
type accuracy struct {
	nodes, buckets int // buckets 1 for a fixed window
	window         time.Duration
	origin         time.Time     // start of the run (and of a window)
	delay          time.Duration // D
	log            [][]issued    // per node
}

// measure returns, for key k, the most units admitted in one window
// (windows on bucket boundaries), the units admitted in the run's first
// window, whether a node denied a request in that window with the rate
// of a.window exhausted, the most requests for k the other nodes of any node were offered
// together in an interval of length D, and the largest rate, in units per
// second, at which one node was offered k over an interval of length D.
func (a *accuracy) measure(k int) (most, full int, reached bool, others int, rate float64) {
	size := int64(a.window) / int64(a.buckets)
	perBucket := map[int64]int{}
	type arr struct {
		at   time.Time
		node int
	}
	var all []arr
	for n, node := range a.log {
		for _, is := range node {
			if is.key == k {
				all = append(all, arr{is.at, n})
			}
		}
	}
	slices.SortFunc(all, func(x, y arr) int { return x.at.Compare(y.at) })
	count := make([]int, len(a.log))
	for i, j := 0, 0; j < len(all); j++ {
		count[all[j].node]++
		for all[j].at.Sub(all[i].at) > a.delay {
			count[all[i].node]--
			i++
		}
		for n := range count {
			others = max(others, j-i+1-count[n])
		}
	}
	end := a.origin.Add(a.window)
	for _, node := range a.log {
		var times []time.Time
		for _, is := range node {
			if is.key != k {
				continue
			}
			if is.exhausted == a.window && !is.at.Before(a.origin) && is.at.Before(end) {
				reached = true
			}
			times = append(times, is.at)
			if is.allowed {
				perBucket[is.at.UnixNano()/size]++
			}
		}
		peak := 0
		for i, j := 0, 0; j < len(times); j++ {
			for times[j].Sub(times[i]) > a.delay {
				i++
			}
			peak = max(peak, j-i+1)
		}
		rate = max(rate, float64(peak)/a.delay.Seconds())
	}
	first := a.origin.UnixNano() / size
	for b := range perBucket {
		// The window of buckets-1 .. b+buckets-1 ending at each bucket that
		// holds units.
		for end := b; end < b+int64(a.buckets); end++ {
			sum := 0
			for id := end - int64(a.buckets) + 1; id <= end; id++ {
				sum += perBucket[id]
			}
			most = max(most, sum)
		}
	}
	for id := first; id < first+int64(a.buckets); id++ {
		full += perBucket[id]
	}
	return most, full, reached, others, rate
}
