package main

import (
	"context"
	"fmt"
	stdsync "sync"
	"time"

	"github.com/shardlimit/shardlimit/internal/redistest"
	shardsync "github.com/shardlimit/shardlimit/sync"
)

// params are the harness's settings.
type params struct {
	limit   int           // L per window
	window  time.Duration // W
	rate    float64       // requests per second offered to each node
	nodes   int           // N
	flood   time.Duration // eviction flood length
	down    time.Duration // kill: time until the empty restart
	stall   time.Duration // proxy: how long replies are held
	recover int           // windows of traffic after the fault ends
	runs    int           // passes over the table
}

// cell is one mode's result in one row of one run.
type cell struct {
	mode      mode
	faultMax  int           // most admitted in a window the fault overlaps
	faultAt   time.Time     // start of that window
	healthy   int           // most admitted in a window clear of the fault (after the first W)
	offered   int           // requests offered in the whole run
	inFault   int           // decisions in [fault start, fault end)
	degraded  int           // of which State() said Degraded just before
	errs      int           // decisions whose Result carried an error
	slowest   time.Duration // the longest decision call
	slowestAt time.Time     // and when it began
	before    []snapshot
	after     []snapshot
	final     []snapshot // at the end of the run
	changes   [][]change
	spanEnd   time.Time // when the fault stopped affecting the mode (see affectedUntil)
}

// row is one fault's result in one run.
type row struct {
	fault          fault
	start, fs, fe  time.Time
	end            time.Time
	note           string
	cells          []cell
	injectErr      error
	redisAddr      string
	throughProxy   bool
	windowsAligned time.Time // first window boundary the fault's window count starts from
}

// ceilTo returns the first multiple of w (in Unix time) at or after t.
func ceilTo(t time.Time, w time.Duration) time.Time {
	n := t.UnixNano()
	k := (n + int64(w) - 1) / int64(w)
	return time.Unix(0, k*int64(w))
}

// runRow starts a private Redis (and proxy), the nodes of every mode, the
// traffic, and injects f in the middle window. Every process and proxy it
// starts is stopped before it returns.
func runRow(ctx context.Context, f fault, p params) (*row, error) {
	srv, err := startServer(ctx)
	if err != nil {
		return nil, err
	}
	defer srv.close()
	e := &env{p: p, srv: srv}
	addr := srv.addr
	if f.proxy {
		if e.px, err = redistest.NewProxy(srv.addr); err != nil {
			return nil, err
		}
		defer e.px.Close()
		addr = e.px.Addr
	}
	r := &row{fault: f, redisAddr: srv.addr, throughProxy: f.proxy}
	nodes := make([][]*node, len(modes))
	defer func() {
		for _, ns := range nodes {
			for _, n := range ns {
				n.close()
			}
		}
	}()
	for i, m := range modes {
		for range p.nodes {
			n, err := newNode(m, p, addr)
			if err != nil {
				return nil, err
			}
			nodes[i] = append(nodes[i], n)
		}
	}
	// Requests come every period/N, half that away from every multiple of
	// period/N (so from window boundaries when W is one): a decision a few
	// milliseconds late, or decided at Redis's TIME, stays in the window of
	// its recorded instant.
	step := time.Duration(float64(time.Second) / p.rate / float64(p.nodes))
	r.start = ceilTo(time.Now().Add(50*time.Millisecond), step).Add(step / 2)
	r.windowsAligned = ceilTo(r.start.Add(2*p.window), p.window)
	r.fs = r.windowsAligned.Add(p.window / 4)
	traffic, stop := context.WithCancel(ctx)
	out := drive(traffic, nodes, p, r.start)
	samples := sample(traffic, nodes, 100*time.Millisecond)
	defer func() { // before the nodes close, on every return
		stop()
		out()
		samples()
	}()
	if !sleepUntil(ctx, r.fs) {
		return nil, ctx.Err()
	}
	r.note, r.injectErr = f.inject(ctx, e)
	r.fe = time.Now()
	r.end = ceilTo(r.fe.Add(time.Duration(p.recover)*p.window), p.window)
	sleepUntil(ctx, r.end)
	stop()
	ds, snaps := out(), samples()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	for i, m := range modes {
		c := cell{mode: m}
		for _, n := range nodes[i] {
			c.changes = append(c.changes, n.stateChanges())
		}
		c.spanEnd = affectedUntil(r, c.changes)
		measureCell(&c, p, r, ds[i])
		c.before, c.after = snapAt(snaps, i, r.fs), snapAt(snaps, i, c.spanEnd)
		c.final = snaps[len(snaps)-1].nodes[i]
		r.cells = append(r.cells, c)
	}
	return r, nil
}

// affectedUntil returns when the fault of r stopped affecting a mode whose
// nodes' state changes are chs: the fault's end, or the last return to
// Healthy after the fault began if later, or the run's end if a node was
// still Degraded.
func affectedUntil(r *row, chs [][]change) time.Time {
	until := r.fe
	for _, cs := range chs {
		if len(cs) == 0 {
			continue
		}
		last := cs[len(cs)-1]
		switch {
		case last.to == shardsync.Degraded:
			until = r.end
		case last.at.After(r.fs) && last.at.After(until):
			until = last.at
		}
	}
	return until
}

// timedSnap is every node's snapshot at one instant, by mode.
type timedSnap struct {
	at    time.Time
	nodes [][]snapshot
}

// sample takes every node's snapshot every d until ctx ends; the returned
// function waits for that and returns them.
func sample(ctx context.Context, nodes [][]*node, d time.Duration) func() []timedSnap {
	var out []timedSnap
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			ts := timedSnap{at: time.Now(), nodes: make([][]snapshot, len(nodes))}
			for i, ns := range nodes {
				for _, n := range ns {
					ts.nodes[i] = append(ts.nodes[i], n.snap())
				}
			}
			out = append(out, ts)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() []timedSnap {
		<-done
		return out
	}
}

// snapAt returns mode i's node snapshots of the last sample at or before
// t (the first sample if none).
func snapAt(snaps []timedSnap, i int, t time.Time) []snapshot {
	best := snaps[0]
	for _, s := range snaps {
		if s.at.After(t) {
			break
		}
		best = s
	}
	return best.nodes[i]
}

// drive starts every node's traffic: node j of N is offered p.rate per
// second from start + j/(N·rate) on. The returned function waits for the
// traffic to end (ctx) and returns each mode's decisions.
func drive(ctx context.Context, nodes [][]*node, p params, start time.Time) func() [][]decision {
	var wg stdsync.WaitGroup
	per := make([][][]decision, len(nodes))
	period := time.Duration(float64(time.Second) / p.rate)
	for i, ns := range nodes {
		per[i] = make([][]decision, len(ns))
		for j, n := range ns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				first := start.Add(time.Duration(j) * period / time.Duration(len(ns)))
				per[i][j] = offer(ctx, n, j, "client:1", p.rate, first, time.Unix(1<<40, 0))
			}()
		}
	}
	return func() [][]decision {
		wg.Wait()
		out := make([][]decision, len(nodes))
		for i := range per {
			for _, d := range per[i] {
				out[i] = append(out[i], d...)
			}
		}
		return out
	}
}

// measureCell counts what mode m admitted in row r, in the windows that
// overlap [r.fs, c.spanEnd) and in those clear of it.
func measureCell(c *cell, p params, r *row, ds []decision) {
	c.offered = len(ds)
	ts := admitted(ds)
	fault := span{r.fs, c.spanEnd}
	if c.mode.aligned() {
		c.faultMax, c.faultAt = maxAligned(ts, p.window, fault)
	} else {
		c.faultMax, c.faultAt = maxSliding(ts, p.window, fault)
	}
	// Clear: before the fault, or W after it stopped affecting the mode
	// (a store that lost its counts can grant a window's limit afresh).
	c.healthy = maxOutside(ts, p.window, c.mode.aligned(), span{r.start.Add(p.window), r.end}, span{r.fs, c.spanEnd.Add(p.window)})
	for _, d := range ds {
		if d.took > c.slowest {
			c.slowest, c.slowestAt = d.took, d.at
		}
		if d.err {
			c.errs++
		}
		if !d.at.Before(r.fs) && d.at.Before(c.spanEnd) {
			c.inFault++
			if d.degraded {
				c.degraded++
			}
		}
	}
}

// runTable runs every fault of the table once.
func runTable(ctx context.Context, p params, fs []fault, log func(string, ...any)) ([]*row, error) {
	var rows []*row
	for _, f := range fs {
		t0 := time.Now()
		r, err := runRow(ctx, f, p)
		if err != nil {
			return rows, fmt.Errorf("%s: %w", f.id, err)
		}
		log("faults: %s done in %v (%s)", f.id, time.Since(t0).Round(time.Second), r.note)
		rows = append(rows, r)
	}
	return rows, nil
}
