// Command accuracy replays request traces through shardlimit's four
// algorithms and through the peers whose API accepts an explicit instant,
// and compares every decision with an exact sliding window log. It prints
// a markdown report on standard output.
//
// For each trace and limiter it reports the worst number of requests
// admitted for one key in any interval [s, s+W) as a multiple of the limit
// (1.00 is exact; the sliding log must never exceed it); the share of all
// requests the limiter allowed where an exact log run over the same trace
// denied (wrongly allowed) or denied where it allowed (wrongly denied), each
// keeping its own state, so one early difference can shift later ones; and
// the share admitted over the limit: admitted although the requests the
// limiter had itself admitted in the last W already reached the limit, a
// per-decision measure that does not compound.
//
// Output is deterministic for given flags: traces come from a seeded RNG
// and every decision gets the request's instant. Usage:
//
//	go run ./cmd/accuracy [-quick] [-limit 100] [-window 1s] [-buckets 10] [-seed 1]
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/bench"
)

// decider is a limiter replaying a trace: one decision at an instant.
type decider interface {
	AllowAt(key string, now time.Time) bool
}

// candidate names a limiter of the report and builds a fresh one.
type candidate struct {
	name string
	note string
	new  func(p bench.Profile, buckets int) (decider, error)
}

func ours(alg shardlimit.Algorithm, note string) candidate {
	return candidate{
		name: "shardlimit " + alg.String(),
		note: note,
		new: func(p bench.Profile, buckets int) (decider, error) {
			return bench.NewOursConfig(shardlimit.Config{
				Algorithm:       alg,
				Limit:           p.Limit,
				Window:          p.Window,
				Buckets:         buckets,
				JanitorInterval: -1,
			})
		},
	}
}

var candidates = []candidate{
	ours(shardlimit.FixedWindow, "fixed windows aligned to Unix time"),
	ours(shardlimit.SlidingLog, "exact; must match the reference"),
	ours(shardlimit.SlidingCounter, "sub-window buckets, oldest weighted"),
	ours(shardlimit.GCRA, "token bucket, burst = limit"),
	{
		name: "x/time/rate",
		note: "token bucket, burst = limit, keyed map",
		new: func(p bench.Profile, _ int) (decider, error) {
			return bench.NewXTimeMutex(p), nil
		},
	},
	{
		name: "httprate",
		note: "LimitCounter driven as its RateLimiter does; keys by 64-bit hash",
		new: func(p bench.Profile, _ int) (decider, error) {
			return bench.NewHTTPRate(p), nil
		},
	},
	{
		name: "throttled",
		note: "GCRA on memstore, replayed through SetTimeNow",
		new: func(p bench.Profile, _ int) (decider, error) {
			return bench.NewThrottledReplay(p)
		},
	},
}

// notReplayed lists the peers that cannot replay a trace, and why.
var notReplayed = []string{
	"sethvargo/go-limiter memorystore: reads its own clock (time.now through go:linkname) with no hook for another",
	"ulule/limiter memory store: calls time.Now inside the store with no hook for another",
	"go-redis/redis_rate: its Lua script reads the Redis server's TIME",
}

// outcome is one limiter's result on one trace.
type outcome struct {
	admitted     int
	worst        float64
	wrongAllowed int // allowed where the independent exact log denied
	wrongDenied  int // denied where the independent exact log allowed
	over         int // admitted with its own history in the last W at the limit
	err          error
}

func main() {
	quick := flag.Bool("quick", false, "shorter traces (a few seconds in all), for CI smoke runs")
	limit := flag.Int("limit", 100, "limit per window of every key")
	window := flag.Duration("window", time.Second, "window W")
	buckets := flag.Int("buckets", shardlimit.DefaultBuckets, "buckets of shardlimit's sliding counter")
	seed := flag.Uint64("seed", 1, "seed of the traces")
	flag.Parse()
	if *limit < 1 || *window <= 0 {
		fmt.Fprintln(os.Stderr, "accuracy: -limit and -window must be positive")
		os.Exit(2)
	}
	start := time.Now()
	p := params{limit: *limit, window: int64(*window), windows: 600, keys: 10_000}
	if *quick {
		p.windows, p.keys = 60, 2_000
	}
	p.base = 1_700_000_000 * int64(time.Second)
	p.base -= p.base % p.window
	if err := report(os.Stdout, p, *buckets, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "accuracy:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "accuracy: done in %v\n", time.Since(start).Round(time.Millisecond))
}

// report runs every trace through the reference and every candidate and
// writes the markdown report to w.
func report(w io.Writer, p params, buckets int, seed uint64) error {
	prof := bench.Profile{Name: "accuracy", Limit: p.limit, Window: time.Duration(p.window)}
	ts := traces(p, seed)
	fmt.Fprintf(w, "# Accuracy against an exact sliding window log\n\n")
	fmt.Fprintf(w, "Limit %d per window W = %v for every key; shardlimit's sliding counter has %d buckets. "+
		"Traces span %d windows (seed %d).\n\n", p.limit, time.Duration(p.window), buckets, p.windows, seed)
	fmt.Fprintf(w, "- **worst window**: the most requests admitted for one key in any interval [s, s+W), "+
		"as a multiple of the limit (the exact log never exceeds 1.00).\n")
	fmt.Fprintf(w, "- **wrongly allowed / denied**: share of all requests the limiter allowed where an exact log "+
		"run over the same trace denied, or denied where it allowed. Each keeps its own state, so under "+
		"sustained overload one early difference shifts later ones.\n")
	fmt.Fprintf(w, "- **over the limit**: share of all requests the limiter admitted although the requests it had "+
		"itself admitted in the last W already numbered the limit: a per-decision count that does not compound.\n\n")
	for _, tr := range ts {
		keys, err := bench.NewKeySet(tr.keys, seed)
		if err != nil {
			return err
		}
		names := make([]string, tr.keys)
		for i := range names {
			names[i] = keys.Key(i)
		}
		ref, refWorst := replayReference(tr, names, prof)
		refAdmitted := 0
		for _, ok := range ref {
			if ok {
				refAdmitted++
			}
		}
		fmt.Fprintf(w, "## %s\n\n%s: %d requests, %d key(s); the exact log admits %d (%.1f%%), worst window %.2f.\n\n",
			tr.name, tr.desc, len(tr.reqs), tr.keys, refAdmitted, pct(refAdmitted, len(tr.reqs)), refWorst)
		fmt.Fprintf(w, "| limiter | admitted | worst window / limit | wrongly allowed | wrongly denied | over the limit | notes |\n")
		fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---|\n")
		for _, c := range candidates {
			o := replay(tr, names, prof, buckets, c, ref)
			if o.err != nil {
				return fmt.Errorf("%s on %s: %w", c.name, tr.name, o.err)
			}
			fmt.Fprintf(w, "| %s | %d (%.1f%%) | %.2f | %.3f%% | %.3f%% | %.3f%% | %s |\n",
				c.name, o.admitted, pct(o.admitted, len(tr.reqs)), o.worst,
				pct(o.wrongAllowed, len(tr.reqs)), pct(o.wrongDenied, len(tr.reqs)),
				pct(o.over, len(tr.reqs)), c.note)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "Not replayed (no way to pass the instant of a decision):\n\n")
	for _, n := range notReplayed {
		fmt.Fprintf(w, "- %s\n", n)
	}
	fmt.Fprintf(w, "\nThey appear in the speed benchmarks only. The token buckets (shardlimit gcra, x/time/rate, "+
		"throttled; sethvargo and redis_rate too) admit up to about twice the limit in one window by design: "+
		"a full bucket of `limit` plus `limit` refilled during the window.\n")
	fmt.Fprintf(w, "\nShares are of all requests of the trace, including those of keys far below the limit.\n")
	return nil
}

func pct(n, total int) float64 {
	if total == 0 {
		return 0
	}
	return 100 * float64(n) / float64(total)
}

// replayReference returns the exact log's decision for every request of tr
// and its worst window as a multiple of the limit.
func replayReference(tr trace, names []string, p bench.Profile) ([]bool, float64) {
	e := bench.NewExactLog(p.Limit, p.Window)
	dec := make([]bool, len(tr.reqs))
	admitted := make([][]int64, tr.keys)
	for i, r := range tr.reqs {
		dec[i] = e.AllowAt(names[r.key], r.t)
		if dec[i] {
			admitted[r.key] = append(admitted[r.key], r.t)
		}
	}
	return dec, worst(admitted, p)
}

// replay runs tr through a fresh limiter of c and compares it with ref.
func replay(tr trace, names []string, p bench.Profile, buckets int, c candidate, ref []bool) outcome {
	d, err := c.new(p, buckets)
	if err != nil {
		return outcome{err: err}
	}
	if k, ok := d.(interface{ Close() }); ok {
		defer k.Close()
	}
	var o outcome
	admitted := make([][]int64, tr.keys)
	shadow := bench.NewExactLog(p.Limit, p.Window) // the limiter's own admissions
	for i, r := range tr.reqs {
		key := names[r.key]
		ok := d.AllowAt(key, time.Unix(0, r.t))
		switch {
		case ok && !ref[i]:
			o.wrongAllowed++
		case !ok && ref[i]:
			o.wrongDenied++
		}
		if ok {
			o.admitted++
			if !shadow.Would(key, r.t) {
				o.over++
			}
			shadow.Record(key, r.t)
			admitted[r.key] = append(admitted[r.key], r.t)
		}
	}
	o.worst = worst(admitted, p)
	if strings.Contains(c.name, "sliding_log") && o.wrongAllowed+o.wrongDenied+o.over != 0 {
		o.err = fmt.Errorf("the exact sliding log disagrees with the reference on %d requests",
			o.wrongAllowed+o.wrongDenied+o.over)
	}
	return o
}

// worst returns the largest per-key count in any window, over the limit.
func worst(admitted [][]int64, p bench.Profile) float64 {
	best := 0
	for _, ts := range admitted {
		best = max(best, bench.MaxInWindow(ts, p.Window))
	}
	return float64(best) / float64(p.Limit)
}
