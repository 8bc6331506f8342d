// Command shardlimit-demo is a fasthttp server limited by shardlimit's
// middleware, to see the limits, headers and 429s with curl:
//
//	go run ./cmd/shardlimit-demo
//	curl -i -H 'X-Client-ID: client-1' http://127.0.0.1:8080/foo
//	curl -i http://127.0.0.1:8080/bar        # no X-Client-ID: keyed by IP
//	curl -i http://127.0.0.1:8080/healthz    # never limited
//
// Routes: /foo and /bar answer 200 with a short body and are limited by the
// rules; /healthz answers 200 and is not limited; anything else is 404 (and
// limited only if a rule matches it). Clients identify with the X-Client-ID
// header; without it they are keyed by their address (IPv4 /32, IPv6 /64).
//
// The seed rules (rules.json beside this file, embedded in the binary):
// client-1 may call /foo 10 times a minute (fixed window) and /bar 5 times a
// minute (sliding log); client-2 20 and 10; any other client 5 and 2.
// Counters live in memory.
//
// Flags:
//
//	-addr       listen address (default 127.0.0.1:8080)
//	-rules      JSON rules file (default: the embedded copy of rules.json)
//	-algorithm  algorithm of rules that name none (default fixed_window)
//
// SIGHUP reloads the rules file, keeping the counters of unchanged rules;
// SIGINT and SIGTERM shut the server down gracefully.
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/fasthttpmw"
)

//go:embed rules.json
var seedRules []byte

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr, nil); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "shardlimit-demo:", err)
		}
		os.Exit(2)
	}
}

// hooks replace the process-wide parts of run in tests.
type hooks struct {
	clock    shardlimit.Clock       // decision time; nil: the request time
	signals  chan os.Signal         // instead of signal.Notify
	ready    func(addr net.Addr)    // called once the server listens
	reloaded func(err error)        // called after each SIGHUP
	server   func(*fasthttp.Server) // adjusts the server before it starts
}

// run parses args, serves until ctx is done or a terminating signal
// arrives, and returns nil after a clean shutdown.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, h *hooks) error {
	fs := flag.NewFlagSet("shardlimit-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "listen `address`")
	rulesPath := fs.String("rules", "", "JSON rules `file` (default: the embedded cmd/shardlimit-demo/rules.json)")
	algName := fs.String("algorithm", "fixed_window", "`algorithm` of rules that name none: fixed_window, sliding_log, sliding_counter or gcra")
	// Redis sync goes here: a -redis flag (address of the Redis that shares
	// counts between nodes, empty for in-memory only) handed to the sync
	// package when it exists; see newMiddleware.
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	alg, err := shardlimit.ParseAlgorithm(*algName)
	if err != nil {
		return err
	}
	if h == nil {
		h = &hooks{}
	}
	load := func() (*fasthttpmw.Rules, error) {
		if *rulesPath == "" {
			return fasthttpmw.ParseRules(seedRules)
		}
		return fasthttpmw.LoadRules(*rulesPath)
	}
	rules, err := load()
	if err != nil {
		return err
	}
	mw, err := newMiddleware(rules, alg, h.clock)
	if err != nil {
		return err
	}
	defer mw.Close()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &fasthttp.Server{
		Handler:      router(mw.Wrap(app)),
		Name:         "shardlimit-demo",
		ReadTimeout:  10 * time.Second,
		WriteTimeout: 10 * time.Second,
		IdleTimeout:  time.Minute,
	}
	if h.server != nil {
		h.server(srv)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	src := "embedded rules.json"
	if *rulesPath != "" {
		src = *rulesPath
	}
	fmt.Fprintf(stdout, "shardlimit-demo listening on http://%s (rules: %s, default algorithm %s)\n", ln.Addr(), src, alg)
	fmt.Fprintf(stdout, "try: curl -i -H 'X-Client-ID: client-1' http://%s/foo\n", ln.Addr())
	if h.ready != nil {
		h.ready(ln.Addr())
	}

	sigs := h.signals
	if sigs == nil {
		sigs = make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM)
		defer signal.Stop(sigs)
	}
	for {
		select {
		case <-ctx.Done():
			return shutdown(srv, served)
		case err := <-served:
			return err
		case sig := <-sigs:
			if sig != syscall.SIGHUP {
				fmt.Fprintf(stdout, "%v: shutting down\n", sig)
				return shutdown(srv, served)
			}
			r, err := load()
			if err == nil {
				err = mw.Reload(r)
			}
			if err != nil {
				fmt.Fprintf(stderr, "SIGHUP: rules not reloaded: %v\n", err)
			} else {
				fmt.Fprintf(stdout, "SIGHUP: rules reloaded from %s (%d rules)\n", src, mw.Stats().Rules)
			}
			if h.reloaded != nil {
				h.reloaded(err)
			}
		}
	}
}

// newMiddleware builds the demo's middleware: clients keyed by X-Client-ID,
// else by address; the X-RateLimit trio, the IETF fields, the verbose pair
// and Retry-After.
func newMiddleware(rules *fasthttpmw.Rules, alg shardlimit.Algorithm, clock shardlimit.Clock) (*fasthttpmw.Middleware, error) {
	// Redis sync goes here: with -redis set, wrap each rule's limiter with
	// the sync package's reconciler (the in-memory limiters stay the
	// decision path).
	return fasthttpmw.New(fasthttpmw.Config{Options: fasthttpmw.Options{
		Rules:            rules,
		Keys:             fasthttpmw.KeyConfig{Header: "X-Client-ID"},
		Headers:          fasthttpmw.HeaderXRateLimit | fasthttpmw.HeaderIETF | fasthttpmw.HeaderVerbose | fasthttpmw.HeaderRetryAfter,
		DefaultAlgorithm: alg,
		Clock:            clock,
	}})
}

// shutdown stops srv gracefully (in-flight requests finish, for at most 5 s)
// and waits for Serve to return.
func shutdown(srv *fasthttp.Server, served <-chan error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.ShutdownWithContext(ctx)
	if serr := <-served; err == nil {
		err = serr
	}
	return err
}

// router sends /healthz around the limiter.
func router(limited fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/healthz" {
			ctx.SetContentType("text/plain; charset=utf-8")
			ctx.SetBodyString("ok\n")
			return
		}
		limited(ctx)
	}
}

// app is the limited application: /foo and /bar.
func app(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("text/plain; charset=utf-8")
	switch string(ctx.Path()) {
	case "/foo":
		ctx.SetBodyString("foo: ok\n")
	case "/bar":
		ctx.SetBodyString("bar: ok\n")
	default:
		ctx.SetStatusCode(fasthttp.StatusNotFound)
		ctx.SetBodyString("not found\n")
	}
}
