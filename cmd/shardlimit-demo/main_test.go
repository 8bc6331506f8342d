package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/goleak"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/fasthttpmw"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwtest"
	"github.com/shardlimit/shardlimit/internal/redistest"
	shardsync "github.com/shardlimit/shardlimit/sync"
)

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv("SHARDLIMIT_DEMO_ARGS"); ok {
		// Run as the command itself: see TestExitStatus.
		os.Args = append([]string{os.Args[0]}, strings.Fields(args)...)
		main()
		os.Exit(0)
	}
	// fasthttp's process-wide Date refresher never stops, by design.
	goleak.VerifyTestMain(redistest.StopAtExit(m), goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"))
}

// syncBuffer is a bytes.Buffer safe for the server and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// demo is a running demo server.
type demo struct {
	url      string
	obsURL   string // of -metrics, if given
	clock    mwtest.Clock
	signals  chan os.Signal
	shared   chan *shardsync.Shared // the Redis-shared limiters built
	limiters []*shardsync.Shared    // drained from shared by flush
	reloaded chan error
	done     chan error
	stdout   *syncBuffer
	stderr   *syncBuffer
	mw       *fasthttpmw.Middleware // set before the demo is ready
}

// startDemo runs the demo with args on an ephemeral loopback port and an
// injected clock; it is stopped with SIGTERM at the end of the test.
func startDemo(t *testing.T, args ...string) *demo {
	t.Helper()
	return startDemoClock(t, mwtest.NewClock(), args...)
}

// startDemoClock is startDemo with a given clock, which several demos of a
// test may share.
func startDemoClock(t *testing.T, clock mwtest.Clock, args ...string) *demo {
	t.Helper()
	d := &demo{
		clock:    clock,
		signals:  make(chan os.Signal, 1),
		shared:   make(chan *shardsync.Shared, 100),
		reloaded: make(chan error, 1),
		done:     make(chan error, 1),
		stdout:   &syncBuffer{},
		stderr:   &syncBuffer{},
	}
	ready := make(chan net.Addr, 1)
	obsReady := make(chan net.Addr, 1)
	h := &hooks{
		obsReady: func(a net.Addr) { obsReady <- a },
		clock:    d.clock,
		signals:  d.signals,
		ready:    func(a net.Addr) { ready <- a },
		reloaded: func(err error) { d.reloaded <- err },
		server:   func(s *fasthttp.Server) { s.MaxIdleWorkerDuration = 50 * time.Millisecond },
		built:    func(mw *fasthttpmw.Middleware) { d.mw = mw },
		// Tests of decisions must not fall back to the local limiter
		// because a loaded machine under -race kept a Redis call past the
		// 50 ms default.
		exact: 5 * time.Second,
		limiter: func(_ string, l shardlimit.Limiter) {
			if s, ok := l.(*shardsync.Shared); ok {
				d.shared <- s
			}
		},
	}
	go func() {
		d.done <- run(context.Background(), append([]string{"-addr", "127.0.0.1:0"}, args...), d.stdout, d.stderr, h)
	}()
	select {
	case a := <-ready:
		d.url = "http://" + a.String()
		select {
		case a := <-obsReady:
			d.obsURL = "http://" + a.String()
		default:
		}
	case err := <-d.done:
		t.Fatalf("demo exited: %v\n%s", err, d.stderr)
	case <-time.After(10 * time.Second):
		t.Fatal("demo did not start within 10 s")
	}
	t.Cleanup(func() {
		d.signals <- syscall.SIGTERM
		select {
		case err := <-d.done:
			if err != nil {
				t.Errorf("demo shutdown: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("demo did not stop within 10 s")
		}
	})
	return d
}

// sighup reloads the demo's rules and returns the reload's error.
func (d *demo) sighup(t *testing.T) error {
	t.Helper()
	d.signals <- syscall.SIGHUP
	select {
	case err := <-d.reloaded:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("no reload within 10 s")
		return nil
	}
}

// TestDemoSeedRules runs the demo with its embedded seed rules: tiers by
// X-Client-ID, the IP fallback, the headers, the 429 and the unlimited
// /healthz.
func TestDemoSeedRules(t *testing.T) {
	d := startDemo(t)
	c := mwtest.NewClient(t, d.url, 1)
	if !strings.Contains(d.stdout.String(), "listening on "+d.url) {
		t.Errorf("startup message %q", d.stdout)
	}
	d.clock.At(mwtest.Sec(20))
	for i := range 10 {
		mwtest.Check(t, "client-1 /foo", c.Get("/foo", "X-Client-ID", "client-1"), 200, mwtest.H{
			mwtest.XLimit: "10", mwtest.XRemaining: strconv.Itoa(9 - i), mwtest.XStrategy: "fixed_window",
			mwtest.RLPolicy: `"client-1-foo";q=10;w=60`, mwtest.XReset: "40",
		})
	}
	r := c.Get("/foo", "X-Client-ID", "client-1")
	mwtest.Check(t, "client-1 /foo #11", r, 429, mwtest.H{mwtest.RetryAfter: "40"})
	if !strings.HasPrefix(r.Body, "Too Many Requests") {
		t.Errorf("429 body %q", r.Body)
	}
	mwtest.Check(t, "client-2 /bar", c.Get("/bar", "X-Client-ID", "client-2"), 200, mwtest.H{
		mwtest.XLimit: "10", mwtest.XRemaining: "9", mwtest.XStrategy: "sliding_log",
	})
	mwtest.Check(t, "no id /bar #1", c.Get("/bar"), 200, mwtest.H{mwtest.XLimit: "2", mwtest.XRemaining: "1"})
	mwtest.Check(t, "no id /bar #2", c.Get("/bar"), 200, mwtest.H{mwtest.XLimit: "2", mwtest.XRemaining: "0"})
	mwtest.Check(t, "no id /bar #3", c.Get("/bar"), 429, mwtest.H{mwtest.RetryAfter: "60"})
	for range 3 {
		r := c.Get("/healthz")
		mwtest.Check(t, "/healthz", r, 200, mwtest.H{mwtest.XLimit: mwtest.Absent})
		if r.Body != "ok\n" {
			t.Errorf("/healthz body %q", r.Body)
		}
	}
	mwtest.Check(t, "/nope", c.Get("/nope"), 404, mwtest.H{mwtest.XLimit: mwtest.Absent})
	if err := d.sighup(t); err != nil {
		t.Errorf("reloading the embedded rules: %v", err)
	}
	mwtest.Check(t, "client-1 /foo after reload", c.Get("/foo", "X-Client-ID", "client-1"), 429, mwtest.H{mwtest.RetryAfter: "40"})
}

// TestDemoUnknownClientsKeyedByAddress checks that identities the rules do
// not list are keyed by address, as requests without one are: rotating
// X-Client-ID values from one address share that address's budget of 2 on
// /bar, while the listed clients keep budgets of their own.
func TestDemoUnknownClientsKeyedByAddress(t *testing.T) {
	d := startDemo(t)
	c := mwtest.NewClient(t, d.url, 1)
	d.clock.At(mwtest.Sec(5))
	mwtest.Check(t, "rot1", c.Get("/bar", "X-Client-ID", "rot1"), 200, mwtest.H{mwtest.XLimit: "2", mwtest.XRemaining: "1"})
	mwtest.Check(t, "rot2", c.Get("/bar", "X-Client-ID", "rot2"), 200, mwtest.H{mwtest.XLimit: "2", mwtest.XRemaining: "0"})
	for _, id := range []string{"rot3", "rot4", ""} {
		var hdr []string
		name := "no id"
		if id != "" {
			hdr, name = []string{"X-Client-ID", id}, id
		}
		mwtest.Check(t, name, c.Get("/bar", hdr...), 429, mwtest.H{mwtest.XLimit: "2", mwtest.RetryAfter: "60"})
	}
	for i := range 5 {
		mwtest.Check(t, "client-1", c.Get("/bar", "X-Client-ID", "client-1"), 200, mwtest.H{mwtest.XLimit: "5", mwtest.XRemaining: strconv.Itoa(4 - i)})
	}
	mwtest.Check(t, "client-2", c.Get("/bar", "X-Client-ID", "client-2"), 200, mwtest.H{mwtest.XLimit: "10", mwtest.XRemaining: "9"})
}

// TestDemoReloadFile runs the demo on a rules file, changes the file and
// reloads it with SIGHUP: counters of unchanged rules survive, a raised
// limit applies at once, a broken file is refused and the rules stay; a rule
// without an algorithm gets -algorithm's.
func TestDemoReloadFile(t *testing.T) {
	seed, err := os.ReadFile("rules.json")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "rules.json")
	if err := os.WriteFile(path, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDemo(t, "-rules", path, "-algorithm", "sliding_counter")
	c := mwtest.NewClient(t, d.url, 1)
	for range 11 {
		c.Get("/foo", "X-Client-ID", "client-1")
	}
	mwtest.Check(t, "client-1 over", c.Get("/foo", "X-Client-ID", "client-1"), 429, mwtest.H{mwtest.XLimit: "10"})

	raised := strings.Replace(string(seed), `"name": "client-1-foo", "path": "/foo", "algorithm": "fixed_window", "limit": 10`,
		`"name": "client-1-foo", "path": "/foo", "algorithm": "fixed_window", "limit": 12`, 1)
	raised = strings.Replace(raised, `"rules": [`, `"rules": [{"name": "qux", "path": "/qux", "limit": 3, "window": "1m"},`, 1)
	if raised == string(seed) {
		t.Fatal("seed file changed; update the test")
	}
	if err := os.WriteFile(path, []byte(raised), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.sighup(t); err != nil {
		t.Fatal(err)
	}
	mwtest.Check(t, "client-1 after raise #1", c.Get("/foo", "X-Client-ID", "client-1"), 200, mwtest.H{mwtest.XLimit: "12", mwtest.XRemaining: "1"})
	mwtest.Check(t, "client-1 after raise #2", c.Get("/foo", "X-Client-ID", "client-1"), 200, mwtest.H{mwtest.XRemaining: "0"})
	mwtest.Check(t, "client-1 after raise #3", c.Get("/foo", "X-Client-ID", "client-1"), 429, nil)
	mwtest.Check(t, "/qux", c.Get("/qux"), 404, mwtest.H{mwtest.XLimit: "3", mwtest.XStrategy: "sliding_counter"})
	if !strings.Contains(d.stdout.String(), "-algorithm sliding_counter: applied to the rules that name none: qux\n") {
		t.Errorf("stdout %q does not say the reloaded rule qux took -algorithm", d.stdout)
	}

	if err := os.WriteFile(path, []byte(`{"rules": [{"name": "x"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.sighup(t); err == nil {
		t.Fatal("a broken rules file was accepted")
	}
	if !strings.Contains(d.stderr.String(), "rules not reloaded") {
		t.Errorf("stderr %q", d.stderr)
	}
	mwtest.Check(t, "/qux after a refused reload", c.Get("/qux"), 404, mwtest.H{mwtest.XLimit: "3", mwtest.XRemaining: "1"})

	// A file without rules is refused unless it says limiting is off.
	mwtest.Check(t, "/qux #3", c.Get("/qux"), 404, mwtest.H{mwtest.XLimit: "3", mwtest.XRemaining: "0"})
	for _, empty := range []string{``, `{}`, `{"rules": []}`} {
		if err := os.WriteFile(path, []byte(empty), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := d.sighup(t); err == nil {
			t.Fatalf("rules file %q accepted", empty)
		}
		mwtest.Check(t, "/qux after an empty file", c.Get("/qux"), 429, mwtest.H{mwtest.XLimit: "3"})
	}
	if !strings.Contains(d.stderr.String(), `no rules in the rule set; to turn limiting off on purpose, say so: {"limiting": "off"}`) {
		t.Errorf("stderr %q does not say how to turn limiting off", d.stderr)
	}
	if err := os.WriteFile(path, []byte(`{"limiting": "off"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.sighup(t); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(d.stdout.String(), "limiting is off") {
		t.Errorf("stdout %q", d.stdout)
	}
	mwtest.Check(t, "/qux, limiting off", c.Get("/qux"), 404, mwtest.H{mwtest.XLimit: mwtest.Absent})
	// Back on within the window: the counters are kept.
	if err := os.WriteFile(path, []byte(raised), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.sighup(t); err != nil {
		t.Fatal(err)
	}
	mwtest.Check(t, "/qux back on", c.Get("/qux"), 429, mwtest.H{mwtest.XLimit: "3"})
}

func TestDemoFlags(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	emptyRules := file("empty.json", `{"rules": []}`)
	dupRules := file("dup.json", `{"rules": [{"name": "foo", "path": "/foo", "limit": 1, "limit": 1000, "window": "1m"}]}`)
	nsRules := file("ns.json", `{"rules": [{"name": "foo", "path": "/foo", "limit": 5, "window": "1ns"}]}`)
	hugeRules := file("huge.json", "")
	if err := os.Truncate(hugeRules, httplimit.MaxRulesFileBytes+1); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-algorithm", "leaky"}, "unknown algorithm"},
		{[]string{"-rules", filepath.Join(t.TempDir(), "missing.json")}, "no such file"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"-addr", "256.0.0.1:1"}, "256.0.0.1"},
		{[]string{"-bogus"}, "flag provided but not defined"},
		{[]string{"-redis", "no-port"}, "-redis"},
		{[]string{"-redis", "127.0.0.1:1", "-flush", "0s"}, "-flush"},
		{[]string{"-redis", "127.0.0.1:1", "-redis-prefix", "a{b"}, "brace"},
		{[]string{"-rules", emptyRules}, `"limiting": "off"`},
		{[]string{"-rules", dupRules}, `rule "foo": key "limit" given twice`},
		{[]string{"-rules", nsRules}, `rule "foo": window 1ns outside [1ms`},
		{[]string{"-rules", hugeRules}, "MaxRulesFileBytes"},
		{[]string{"-metrics-group", "route"}, "-metrics-group"},
	} {
		var out, errOut syncBuffer
		err := run(context.Background(), tc.args, &out, &errOut, &hooks{signals: make(chan os.Signal)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error mentioning %q", tc.args, err, tc.want)
		}
	}
	var out, errOut syncBuffer
	if err := run(context.Background(), []string{"-h"}, &out, &errOut, nil); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
	for _, f := range []string{"-addr", "-rules", "-algorithm", "-redis", "-redis-prefix", "-flush", "-metrics", "-status-public", "-metrics-group"} {
		if !strings.Contains(errOut.String(), f) {
			t.Errorf("usage does not mention %s:\n%s", f, errOut.String())
		}
	}
}

// TestExitStatus runs the test binary as the command (TestMain calls main
// when SHARDLIMIT_DEMO_ARGS is set) and checks its exit status: 0 for -h, which
// prints the usage, 2 for a bad flag.
func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		args   string
		status int
		stderr string
	}{
		{"-h", 0, "-redis-prefix"},
		{"-help", 0, "-redis-prefix"},
		{"-bogus", 2, "flag provided but not defined"},
	} {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "SHARDLIMIT_DEMO_ARGS="+tc.args)
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
