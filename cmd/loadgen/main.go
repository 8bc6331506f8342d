// Command loadgen drives a running server over loopback with a mix of
// clients, each calling a route at a steady rate, for a bounded time, and
// reports per client and route what the rate limiter did: sent, admitted
// (2xx), denied (429), other answers and errors, the most requests admitted
// in one window against the limit, and latency percentiles. It is how to
// see shardlimit's limits hold under real traffic:
//
//	go run ./cmd/shardlimit-demo      # terminal 1
//	go run ./cmd/loadgen              # terminal 2: 10 s of the default mix
//	go run ./cmd/loadgen -duration 30s -clients 'client-1:/foo=20/s,anon:/bar=1/s'
//
// The limit and window of each route are read from the answers:
// X-RateLimit-Limit (else RateLimit-Policy q=) and X-RateLimit-Window-Ms
// (else RateLimit-Policy w=, else -window). For each route the report
// gives the most 2xx answers in one fixed window aligned like the server's
// (Unix time / window) and in any sliding interval one window long, as
// counts and as a multiple of the limit.
//
// Pacing is open-loop: each stream's requests are scheduled at its rate
// whatever the server's answers are doing. When the server is slower than
// the schedule and all -concurrency requests are in flight, a send waits
// for a free slot and leaves late (counted in "late" when more than 10 ms
// behind), later sends catch up, and sends still waiting at the end are
// counted "missed". Latency is measured from the actual send.
//
// A progress line goes to stderr once a second; the report goes to stdout
// (as JSON with -json). The run stops by itself after -duration (at most
// 10m) and at most -max-requests requests; Ctrl-C stops it early and
// prints the report so far (a second Ctrl-C exits at once); the exit
// status is then 130, as after any interrupted command.
//
// Only loopback servers are driven unless -allow-remote is set: this is a
// load tool, and a mistyped or pasted -url must not send thousands of
// requests a second to someone else's server.
//
// Flags:
//
//	-url           server, scheme://host[:port] (default http://127.0.0.1:8080)
//	-duration      how long to send, at most 10m (default 10s)
//	-clients       the mix: client:/route=rate,... (default DefaultClients,
//	               matched to the demo's seed rules); "anon" sends no identity
//	               (the demo keys it, and identities its rules do not list, by
//	               address: on loopback they all share one budget)
//	-header        identity header (default X-Client-ID)
//	-concurrency   cap on requests in flight (default 64)
//	-window        window for routes that state none (default 0: no window counts)
//	-timeout       per-request timeout (default 5s)
//	-max-requests  refuse plans above this many requests (default 1000000)
//	-allow-remote  allow a -url host that is not loopback
//	-json          print the report as JSON
//	-quiet         no progress lines
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// main runs the command with the process's arguments and signals; see the
// package doc.
func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal, restore the default so a second one kills.
	context.AfterFunc(ctx, stop)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, errInterrupted):
		os.Exit(130)
	case errors.Is(err, flag.ErrHelp):
		// -h: the usage went to stderr; status 0, as the flag package's own.
	default:
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
}

// errInterrupted is returned by run after printing the report of a run
// stopped early.
var errInterrupted = errors.New("interrupted")

// hooks adjust run in tests.
type hooks struct {
	config func(*Config) // called on the Config before Run
}

// run parses args, runs the generator until done or ctx is cancelled,
// and writes the report to stdout and progress to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, h *hooks) error {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: loadgen [flags]\n\nDrives a rate-limited server with a mix of clients and reports what was admitted.\n\n")
		fs.PrintDefaults()
	}
	var cfg Config
	fs.StringVar(&cfg.URL, "url", "http://127.0.0.1:8080", "server `URL`, scheme://host[:port]; loopback only unless -allow-remote")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long to send requests (at most 10m)")
	clients := fs.String("clients", DefaultClients, "the `mix`: client:/route=rate,... with rate like 20/s, 90/min or 5/10s; client \"anon\" sends no identity")
	fs.StringVar(&cfg.Header, "header", defaultHeader, "request `header` carrying the client identity")
	fs.IntVar(&cfg.Concurrency, "concurrency", defaultConcurrency, "cap on requests in flight (and connections)")
	fs.DurationVar(&cfg.Window, "window", 0, "rate-limit window for routes whose answers state none (0: no per-window counts for them)")
	fs.DurationVar(&cfg.Timeout, "timeout", defaultTimeout, "per-request timeout (at most 1m)")
	fs.IntVar(&cfg.MaxRequests, "max-requests", defaultMaxRequests, "refuse a plan of more requests than this")
	fs.BoolVar(&cfg.AllowRemote, "allow-remote", false, "allow a -url host that is not loopback (this is a load tool: make sure you may)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	// 0 means "default" to Config; on the command line it is a mistake.
	if cfg.Concurrency == 0 || cfg.Timeout == 0 || cfg.MaxRequests == 0 {
		return errors.New("-concurrency, -timeout and -max-requests must be above 0")
	}
	streams, err := ParseClients(*clients)
	if err != nil {
		return err
	}
	cfg.Streams = streams
	if !*quiet {
		cfg.Progress = stderr
	}
	if h != nil && h.config != nil {
		h.config(&cfg)
	}
	r, err := Run(ctx, cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		err = r.WriteJSON(stdout)
	} else {
		err = r.WriteText(stdout)
	}
	if err == nil && r.Interrupted {
		err = errInterrupted
	}
	return err
}
