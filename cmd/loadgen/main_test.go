package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/goleak"

	"github.com/shardlimit/shardlimit/fasthttpmw"
	"github.com/shardlimit/shardlimit/httplimit"
)

// TestMain fails the package if a test leaves a goroutine running.
func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv("LOADGEN_ARGS"); ok {
		// Run as the command itself: see TestExitStatus.
		os.Args = append([]string{os.Args[0]}, strings.Fields(args)...)
		main()
		os.Exit(0)
	}
	// fasthttp's process-wide Date refresher (started by the test servers)
	// never stops, by design; every other goroutine, the generator's and
	// the client's connection cleaner included, must be gone.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"))
}

// syncBuffer is a bytes.Buffer safe for concurrent writes and reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written.
func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// server describes a test server.
type server struct {
	rules   string                  // JSON rules
	headers *httplimit.HeaderConfig // nil: the demo's
	delay   time.Duration           // added to every answer
}

// demoHeaders are the fields the demo server writes.
var demoHeaders = httplimit.HeaderConfig{IETF: true, Verbose: true}

// start runs a fasthttp server limited by fasthttpmw with s's rules and
// X-Client-ID identities (else the address), on an ephemeral loopback port;
// it answers 200 on every path. Unlike the demo, which keys identities its
// rules do not list by address, every identity is its own key here, so
// the streams of clients a and b have budgets of their own. It is shut
// down at the end of the test. It returns the server's URL.
func (s server) start(t *testing.T) string {
	t.Helper()
	rules, err := httplimit.ParseRules([]byte(s.rules))
	if err != nil {
		t.Fatal(err)
	}
	h := demoHeaders
	if s.headers != nil {
		h = *s.headers
	}
	mw, err := fasthttpmw.New(fasthttpmw.Config{Options: httplimit.Options{
		Rules:   rules,
		Keys:    httplimit.KeyConfig{Header: "X-Client-ID", UnknownIdentity: httplimit.UnknownIdentityOwnKey},
		Headers: h,
	}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	delay := s.delay
	srv := &fasthttp.Server{
		Handler: mw.Wrap(func(ctx *fasthttp.RequestCtx) {
			if delay > 0 {
				time.Sleep(delay)
			}
			ctx.SetBodyString("ok\n")
		}),
		MaxIdleWorkerDuration: 50 * time.Millisecond,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		if err := srv.Shutdown(); err != nil {
			t.Error(err)
		}
		if err := <-served; err != nil {
			t.Error(err)
		}
		mw.Close()
	})
	return "http://" + ln.Addr().String()
}

// testConfig is a Config for a test run: idle connections are closed
// quickly so that fasthttp's cleaner goroutine is gone before goleak looks.
func testConfig(url, clients string, d time.Duration) Config {
	streams, err := ParseClients(clients)
	if err != nil {
		panic(err)
	}
	return Config{URL: url, Duration: d, Streams: streams, IdleConnTimeout: 50 * time.Millisecond}
}

// mustRun runs cfg and fails the test on an error.
func mustRun(t *testing.T, ctx context.Context, cfg Config) *Report {
	t.Helper()
	r, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// stream returns r's report of client on route.
func stream(t *testing.T, r *Report, client, route string) StreamReport {
	t.Helper()
	for _, s := range r.Streams {
		if s.Client == client && s.Route == route {
			return s
		}
	}
	t.Fatalf("no stream %s %s in the report", client, route)
	return StreamReport{}
}

// TestExitStatus runs the test binary as the command (TestMain calls main
// when LOADGEN_ARGS is set) and checks its exit status: 0 for -h, which
// prints the usage, 2 for a bad flag.
func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		args   string
		status int
		stderr string
	}{
		{"-h", 0, "-url"},
		{"-help", 0, "-url"},
		{"-bogus", 2, "flag provided but not defined"},
	} {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "LOADGEN_ARGS="+tc.args)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		status := 0
		if ee, ok := err.(*exec.ExitError); ok {
			status = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if status != tc.status || !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("%s: exit status %d, stderr %q; want %d and %q", tc.args, status, stderr.String(), tc.status, tc.stderr)
		}
	}
}
