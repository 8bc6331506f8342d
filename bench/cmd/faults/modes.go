package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardlimit/shardlimit"
	shardsync "github.com/shardlimit/shardlimit/sync"
)

// mode is one column of the report: a limiter type, algorithm and
// fallback, run on every node.
type mode struct {
	name  string // column header
	id    string // store prefix and short name
	exact bool
	alg   shardlimit.Algorithm
	// fallbackN gives each node a fallback limit of L/N (Exact: a Fallback
	// limiter of that limit; Shared: FallbackLimit).
	fallbackN bool
}

var modes = []mode{
	{name: "Exact fixed window", id: "exact-fw", exact: true, alg: shardlimit.FixedWindow},
	{name: "Exact GCRA", id: "exact-gcra", exact: true, alg: shardlimit.GCRA},
	{name: "Exact GCRA, Fallback L/N", id: "exact-gcra-fb", exact: true, alg: shardlimit.GCRA, fallbackN: true},
	{name: "Shared fixed window, FallbackLimit L/N", id: "shared-fw-fb", alg: shardlimit.FixedWindow, fallbackN: true},
	{name: "Shared sliding counter, FallbackLimit L/N", id: "shared-counter-fb", alg: shardlimit.SlidingCounter, fallbackN: true},
	{name: "Shared sliding log, FallbackLimit L/N", id: "shared-log-fb", alg: shardlimit.SlidingLog, fallbackN: true},
}

// aligned reports whether the mode's windows are the aligned [kW, (k+1)W)
// of Unix time (fixed window) rather than any [s, s+W).
func (m mode) aligned() bool { return m.alg == shardlimit.FixedWindow }

// bound returns the most admissions the sync docs state today for a window
// an outage overlaps, the threshold the verdict uses, and how the docs say
// it. Exact with its default fallback: N processes admit up to N times the
// limit (FailurePolicy, the package doc on eviction). A fallback of L/N
// per node: "bounds the cluster to about the limit" (SharedConfig's
// FallbackLimit, the package doc) or "to bound the cluster's total"
// (FallbackLocal); "about" is judged at 1.1 L.
func (m mode) bound(p params) (bound, pass int, doc string) {
	if !m.fallbackN {
		return p.nodes * p.limit, p.nodes * p.limit, "N·L"
	}
	return p.limit, p.limit + p.limit/10, "≈L"
}

// fallbackLimit is L/N, at least 1.
func (p params) fallbackLimit() int { return max(1, p.limit/p.nodes) }

// decider is what the harness needs of a node's limiter.
type decider interface {
	AllowN(key string, now time.Time, n int) shardlimit.Result
	State() shardsync.State
	Shutdown(ctx context.Context) error
}

// snapshot is what a limiter's Stats and its type's own stats said at one
// instant: the fields that exist today.
type snapshot struct {
	decisions uint64 // Stats: Allowed + Denied
	// Exact
	policy, calls, errors, timeouts uint64
	// Shared
	flushes, failed, unknown, dropped, retried uint64
	lost                                       uint64        // LostUnits: units read (Shared) or granted (Exact) and then missing from the store
	maxGap                                     time.Duration // MaxFlushGap since construction
	// both
	trips   uint64
	evicted uint64
	lastErr string
}

// change is one OnStateChange call.
type change struct {
	at  time.Time
	to  shardsync.State
	err string
}

// node is one process of the cluster: its own client and limiter.
type node struct {
	client *redis.Client
	lim    decider
	fb     shardlimit.Limiter // a fallback built here, closed after lim
	snap   func() snapshot

	mu      sync.Mutex
	changes []change
}

// newClient returns a go-redis client with the options the sync package
// doc recommends.
func newClient(addr string) *redis.Client {
	opt := &redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1}
	opt.Dialer = shardsync.LimitReplies(redis.NewDialer(opt), 0)
	return redis.NewClient(opt)
}

// newNode builds one node of mode m on the Redis at addr.
func newNode(m mode, p params, addr string) (*node, error) {
	n := &node{client: newClient(addr)}
	cfg := shardlimit.Config{Algorithm: m.alg, Limit: p.limit, Window: p.window}
	prefix := "faults:" + m.id + ":"
	onChange := func(c shardsync.StateChange) {
		ch := change{at: c.At, to: c.To}
		if c.Err != nil {
			ch.err = c.Err.Error()
		}
		n.mu.Lock()
		n.changes = append(n.changes, ch)
		n.mu.Unlock()
	}
	var err error
	if m.exact {
		err = n.exact(m, p, cfg, prefix, onChange)
	} else {
		err = n.shared(m, p, cfg, prefix, onChange)
	}
	if err != nil {
		n.client.Close()
		return nil, fmt.Errorf("%s: %w", m.id, err)
	}
	return n, nil
}

func (n *node) exact(m mode, p params, cfg shardlimit.Config, prefix string, onChange func(shardsync.StateChange)) error {
	ec := shardsync.ExactConfig{Config: cfg, Prefix: prefix, OnStateChange: onChange}
	if m.fallbackN {
		fc := cfg
		fc.Limit = p.fallbackLimit()
		fb, err := shardlimit.New(fc)
		if err != nil {
			return err
		}
		n.fb, ec.Fallback = fb, fb
	}
	e, err := shardsync.NewExact(n.client, ec)
	if err != nil {
		if n.fb != nil {
			_ = n.fb.Close()
		}
		return err
	}
	n.lim = e
	n.snap = func() snapshot {
		st, xs := e.Stats(), e.ExactStats()
		s := snapshot{decisions: st.Allowed + st.Denied, policy: xs.PolicyDecisions, calls: xs.Calls,
			errors: xs.Errors, timeouts: xs.Timeouts, trips: xs.Trips, evicted: xs.Eviction.Evicted, lost: xs.LostUnits}
		if xs.LastError != nil {
			s.lastErr = xs.LastError.Error()
		}
		return s
	}
	return nil
}

func (n *node) shared(m mode, p params, cfg shardlimit.Config, prefix string, onChange func(shardsync.StateChange)) error {
	sc := shardsync.SharedConfig{Config: cfg, Prefix: prefix, OnStateChange: onChange}
	if m.fallbackN {
		sc.FallbackLimit = p.fallbackLimit()
	}
	s, err := shardsync.NewShared(n.client, sc)
	if err != nil {
		return err
	}
	n.lim = s
	n.snap = func() snapshot {
		st, ss := s.Stats(), s.SharedStats()
		r := snapshot{decisions: st.Allowed + st.Denied, flushes: ss.Flushes, failed: ss.FailedFlushes,
			unknown: ss.UnknownUnits, dropped: ss.DroppedUnits, retried: ss.RetriedUnits, lost: ss.LostUnits,
			trips: ss.Trips, evicted: ss.Eviction.Evicted, maxGap: ss.MaxFlushGap}
		if ss.LastError != nil {
			r.lastErr = ss.LastError.Error()
		}
		return r
	}
	return nil
}

// close shuts the limiter down (at most 3 s), then its fallback and client.
func (n *node) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = n.lim.Shutdown(ctx)
	if n.fb != nil {
		_ = n.fb.Close()
	}
	_ = n.client.Close()
}

// stateChanges returns a copy of the OnStateChange calls so far.
func (n *node) stateChanges() []change {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]change(nil), n.changes...)
}

// decision is one request as the harness saw it.
type decision struct {
	at       time.Time     // harness clock just before the call
	took     time.Duration // until the call returned
	node     int
	allowed  bool
	degraded bool // State() just before the call
	err      bool // Result.Err set
}

// offer sends requests to n at a steady pace of rate per second, the
// first at first, until end or ctx ends, and returns what it decided.
func offer(ctx context.Context, n *node, id int, key string, rate float64, first, end time.Time) []decision {
	period := time.Duration(float64(time.Second) / rate)
	var out []decision
	for k := 0; ; k++ {
		at := first.Add(time.Duration(k) * period)
		if !at.Before(end) || !sleepUntil(ctx, at) {
			return out
		}
		now := time.Now()
		degraded := n.lim.State() == shardsync.Degraded
		r := n.lim.AllowN(key, now, 1)
		out = append(out, decision{at: now, took: time.Since(now), node: id, allowed: r.Allowed, degraded: degraded, err: r.Err != nil})
	}
}

// sleepUntil waits until t; it returns false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}
