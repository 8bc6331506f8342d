// Command faults reruns, from outside, the store faults of the sync
// package against a cluster of nodes sharing one Redis, and prints a
// markdown report on standard output.
//
// For every fault (a row) it starts a private redis-server on a free
// loopback port, N nodes in this process for each mode (a column), each
// node with its own go-redis client (the options the sync package doc
// recommends) and its own limiter on the mode's shared Prefix, and offers
// every node rate requests per second for one key at a steady pace on the
// real clock. The fault begins a quarter into the third (or fourth) window
// and the traffic runs for -recover windows after it ends:
//
//   - evict: CONFIG SET maxmemory 2mb, maxmemory-policy allkeys-lru, and a
//     writer of 1 KiB junk keys (about 5 MB/s) for -flood; it ends by
//     lifting maxmemory;
//   - kill: SIGKILL the redis-server, start an empty one on the same port
//     -down later;
//   - stall: the nodes reach Redis through a loopback proxy, which holds
//     every reply for -stall, cutting the first one of each connection in
//     half.
//
// For each row and mode it reports the most requests admitted, summed
// over the nodes, in one window the fault overlaps (fixed window: the
// aligned windows [kW, (k+1)W) of Unix time; the others: any [s, s+W)),
// as a count and a multiple of L, against the bound the sync docs state
// for that mode; and what the limiters' State, OnStateChange and stats
// said during the fault. Admission instants are the harness's clock just
// before each decision.
//
// Usage (from bench/):
//
//	go run ./cmd/faults [-quick] [-limit 20] [-window 10s] [-rate 5] [-nodes 2]
//	                    [-flood W/2] [-down 0.3W] [-stall 2W] [-recover 2] [-runs 2]
//	                    [-rows evict,kill,stall]
//
// The full table (W = 10 s, two runs) takes about 7 minutes; -quick (W = 2 s,
// L = 4, one run) well under 2. Every redis-server and proxy it starts is
// stopped on exit, also on an error or an interrupt. Unix only.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// quietLog counts go-redis's log lines (a refused dial per request while
// the store is down) instead of printing them.
type quietLog struct{ lines atomic.Int64 }

func (q *quietLog) Printf(context.Context, string, ...any) { q.lines.Add(1) }

var redisLog quietLog

func main() {
	p, rowIDs, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.Exit(2)
	}
	var table []fault
	for _, f := range faults {
		if slices.Contains(rowIDs, f.id) {
			table = append(table, f)
		}
	}
	redis.SetLogger(&redisLog)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// A bound on the whole run: twice what the rows need, plus a minute.
	ctx, cancel := context.WithTimeout(ctx, 2*expected(p, table)+time.Minute)
	code := run(ctx, p, table)
	cancel()
	stop()
	os.Exit(code)
}

// run runs the table p.runs times and prints the report; it returns the
// exit code.
func run(ctx context.Context, p params, table []fault) int {
	t0, load := time.Now(), loadavg()
	logf := func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }
	logf("faults: %d rows x %d runs, about %v", len(table), p.runs, expected(p, table).Round(time.Second))
	var runs [][]*row
	for i := range p.runs {
		rows, err := runTable(ctx, p, table, logf)
		if err != nil {
			logf("faults: run %d: %v", i+1, err)
			return 1
		}
		runs = append(runs, rows)
	}
	report(os.Stdout, p, table, runs, time.Since(t0), load)
	logf("faults: done in %v", time.Since(t0).Round(time.Second))
	return 0
}

// expected returns about how long the table takes once per run.
func expected(p params, table []fault) time.Duration {
	var d time.Duration
	for _, f := range table {
		fault := p.flood
		switch f.id {
		case "kill":
			fault = p.down
		case "stall":
			fault = p.stall
		}
		// warm-up 2-3 W, the fault, recovery rounded up to a window, setup
		d += 3*p.window + fault + time.Duration(p.recover+1)*p.window + 2*time.Second
	}
	return d * time.Duration(p.runs)
}

// parseFlags reads the flags; durations left zero scale with W.
func parseFlags() (params, []string, error) {
	quick := flag.Bool("quick", false, "W = 2 s, L proportional, one run: a check in well under 2 minutes")
	limit := flag.Int("limit", 0, "L per window (default 2 per second of W: 20 for 10 s)")
	window := flag.Duration("window", 0, "W (default 10s; 2s with -quick)")
	rate := flag.Float64("rate", 5, "requests per second offered to each node")
	nodes := flag.Int("nodes", 2, "nodes N sharing the Redis (each mode)")
	flood := flag.Duration("flood", 0, "length of the eviction flood (default W/2)")
	down := flag.Duration("down", 0, "kill: time until the empty restart (default 3 s per 10 s of W)")
	stall := flag.Duration("stall", 0, "how long the proxy holds replies (default 2W: 20 s for 10 s)")
	recov := flag.Int("recover", 2, "windows of traffic after the fault ends")
	runs := flag.Int("runs", 0, "passes over the table (default 2; 1 with -quick)")
	rows := flag.String("rows", "evict,kill,stall", "faults to run, comma-separated")
	flag.Parse()
	p := params{limit: *limit, window: *window, rate: *rate, nodes: *nodes, flood: *flood,
		down: *down, stall: *stall, recover: *recov, runs: *runs}
	if p.window == 0 {
		p.window = 10 * time.Second
		if *quick {
			p.window = 2 * time.Second
		}
	}
	if p.runs == 0 {
		p.runs = 2
		if *quick {
			p.runs = 1
		}
	}
	if p.limit == 0 {
		p.limit = max(2, int(2*p.window/time.Second))
	}
	p.flood = cmpOr(p.flood, p.window/2)
	p.down = cmpOr(p.down, p.window*3/10)
	p.stall = cmpOr(p.stall, 2*p.window)
	switch {
	case p.window < 100*time.Millisecond || p.window%time.Microsecond != 0:
		return p, nil, fmt.Errorf("-window %v: at least 100ms, whole microseconds", p.window)
	case p.limit < 1 || p.rate <= 0 || p.rate > 1000 || p.nodes < 1 || p.nodes > 16:
		return p, nil, fmt.Errorf("-limit, -rate (up to 1000) and -nodes (1 to 16) must be positive")
	case p.flood < 0 || p.down < 0 || p.stall < 0 || p.recover < 1 || p.runs < 1:
		return p, nil, fmt.Errorf("durations must not be negative; -recover and -runs at least 1")
	}
	ids := strings.Split(*rows, ",")
	for _, id := range ids {
		if !slices.ContainsFunc(faults, func(f fault) bool { return f.id == id }) {
			return p, nil, fmt.Errorf("-rows: unknown fault %q (evict, kill, stall)", id)
		}
	}
	return p, ids, nil
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
