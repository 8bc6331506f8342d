package shardlimitprom_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"go.uber.org/goleak"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/exporters/shardlimitprom"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/httpmw"
	"github.com/shardlimit/shardlimit/metrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Unix(1_734_480_000, 0)

// scenario returns a limiter and a net/http middleware served on loopback
// after a known sequence: the limiter "login" allowed 3, denied 1 and
// refused 1 new key; the middleware's rule "client-1-foo" allowed 3 and
// denied 2 (client-1), "anon-bar" allowed 2 and denied 2 (by address),
// and refused one request with a negative cost.
func scenario(t *testing.T) (shardlimit.Limiter, *httpmw.Middleware) {
	t.Helper()
	clock := shardlimit.NewManualClock(t0)
	lim, err := shardlimit.New(shardlimit.Config{
		Algorithm: shardlimit.FixedWindow, Limit: 2, Window: time.Minute,
		Shards: 1, MaxKeys: 2, JanitorInterval: -1, Clock: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	for _, key := range []string{"a", "a", "a", "b", "c"} {
		lim.AllowN(key, t0, 1)
	}
	rules, err := httplimit.ParseRules([]byte(`{"rules": [
		{"name": "anon-bar", "path": "/bar", "algorithm": "sliding_log", "limit": 2, "window": "1m"}
	], "tiers": [{"name": "client-1", "clients": ["client-1"], "rules": [
		{"name": "client-1-foo", "path": "/foo", "limit": 3, "window": "1m"}
	]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpmw.New(httpmw.Config{
		Options: httplimit.Options{Rules: rules, Keys: httplimit.KeyConfig{Header: "X-Client-ID"}, Clock: clock},
		Cost: func(r *http.Request) int {
			if r.URL.Query().Get("cost") == "-1" {
				return -1
			}
			return 1
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mw.Close() })
	srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })))
	t.Cleanup(srv.Close)
	get := func(path, id string, want int) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if id != "" {
			req.Header.Set("X-Client-ID", id)
		}
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Fatalf("GET %s as %q: %d, want %d", path, id, res.StatusCode, want)
		}
	}
	for _, want := range []int{200, 200, 200, 429, 429} {
		get("/foo", "client-1", want)
	}
	for _, want := range []int{200, 200, 429, 429} {
		get("/bar", "", want)
	}
	get("/bar?cost=-1", "", 500)
	return lim, mw
}

// TestCollectAndCompare checks names, types, help and values of the main
// families after the known sequence, with client_golang's testutil.
func TestCollectAndCompare(t *testing.T) {
	lim, mw := scenario(t)
	c := shardlimitprom.NewCollector(metrics.Limiter("login", lim), metrics.Middleware(mw))
	const want = `
# HELP shardlimit_decisions_total Rate-limit decisions of positive cost, by outcome: allowed, denied, or would_deny (denied, but let through by the middleware's dry run, or by a rule in shadow).
# TYPE shardlimit_decisions_total counter
shardlimit_decisions_total{limiter="anon-bar",outcome="allowed"} 2
shardlimit_decisions_total{limiter="anon-bar",outcome="denied"} 2
shardlimit_decisions_total{limiter="client-1-foo",outcome="allowed"} 3
shardlimit_decisions_total{limiter="client-1-foo",outcome="denied"} 2
shardlimit_decisions_total{limiter="login",outcome="allowed"} 3
shardlimit_decisions_total{limiter="login",outcome="denied"} 1
# HELP shardlimit_keys Client keys the limiter stores now (for sync.Exact, its local fallback's).
# TYPE shardlimit_keys gauge
shardlimit_keys{limiter="anon-bar"} 1
shardlimit_keys{limiter="client-1-foo"} 1
shardlimit_keys{limiter="login"} 2
# HELP shardlimit_keys_refused_total Decisions for a new client key that the full table could not store (refused with ErrTooManyKeys).
# TYPE shardlimit_keys_refused_total counter
shardlimit_keys_refused_total{limiter="anon-bar"} 0
shardlimit_keys_refused_total{limiter="client-1-foo"} 0
shardlimit_keys_refused_total{limiter="login"} 1
# HELP shardlimit_limit Default limit of the limiter's keys (those without a limit of their own), in requests or cost units per window.
# TYPE shardlimit_limit gauge
shardlimit_limit{limiter="anon-bar"} 2
shardlimit_limit{limiter="client-1-foo"} 3
shardlimit_limit{limiter="login"} 2
# HELP shardlimit_limiter_info Always 1: a limiter (for HTTP middleware, a rule, or a group of rules with one series for each algorithm and store among them) with its algorithm and where its counts live: local (this process), shared (sync.Shared: this process, shared through a store) or exact (sync.Exact: the store).
# TYPE shardlimit_limiter_info gauge
shardlimit_limiter_info{algorithm="fixed_window",limiter="client-1-foo",store="local"} 1
shardlimit_limiter_info{algorithm="fixed_window",limiter="login",store="local"} 1
shardlimit_limiter_info{algorithm="sliding_log",limiter="anon-bar",store="local"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"shardlimit_decisions_total", "shardlimit_keys", "shardlimit_keys_refused_total", "shardlimit_limit", "shardlimit_limiter_info"); err != nil {
		t.Error(err)
	}
	const wantErrors = `
# HELP shardlimit_errors_total Requests an HTTP middleware rule matched but did not decide, by kind: too_many_keys (the rule's table was full), invalid (key or instant refused), closed (limiter closed), other (the limiter's own error), answered per the error policy; bad_cost (negative cost, answered 500); no_identity (no client identity, answered 400).
# TYPE shardlimit_errors_total counter
shardlimit_errors_total{kind="bad_cost",limiter="anon-bar"} 1
shardlimit_errors_total{kind="closed",limiter="anon-bar"} 0
shardlimit_errors_total{kind="invalid",limiter="anon-bar"} 0
shardlimit_errors_total{kind="no_identity",limiter="anon-bar"} 0
shardlimit_errors_total{kind="other",limiter="anon-bar"} 0
shardlimit_errors_total{kind="too_many_keys",limiter="anon-bar"} 0
shardlimit_errors_total{kind="bad_cost",limiter="client-1-foo"} 0
shardlimit_errors_total{kind="closed",limiter="client-1-foo"} 0
shardlimit_errors_total{kind="invalid",limiter="client-1-foo"} 0
shardlimit_errors_total{kind="no_identity",limiter="client-1-foo"} 0
shardlimit_errors_total{kind="other",limiter="client-1-foo"} 0
shardlimit_errors_total{kind="too_many_keys",limiter="client-1-foo"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(wantErrors), "shardlimit_errors_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c); n != 3*8+2*6 {
		t.Errorf("%d samples, want %d", n, 3*8+2*6)
	}
}

// TestAgreesWithWriteText checks that the collector reports exactly what
// metrics.WriteText writes, every family and sample, so the demo's
// /metrics (written without client_golang) and a registry agree.
func TestAgreesWithWriteText(t *testing.T) {
	lim, mw := scenario(t)
	sources := []metrics.Source{metrics.Limiter("login", lim), metrics.Middleware(mw)}
	var text bytes.Buffer
	if err := metrics.WriteText(&text, sources...); err != nil {
		t.Fatal(err)
	}
	want := text.String()
	if err := testutil.CollectAndCompare(shardlimitprom.NewCollector(sources...), &text); err != nil {
		t.Error(err)
	}
	// Byte for byte, as a registry writes the text format.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(shardlimitprom.NewCollector(sources...))
	if got := gatherText(t, reg); got != want {
		t.Errorf("the registry wrote\n%s\nWriteText wrote\n%s", got, want)
	}
}

// gatherText returns what reg gathers in the text format.
func gatherText(t *testing.T, reg prometheus.Gatherer) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.String()
}

// TestLint runs client_golang's metric linter and a pedantic registry
// (which checks every sample against its description), and has promtool
// check the registry's text output where it is installed.
func TestLint(t *testing.T) {
	lim, mw := scenario(t)
	c := shardlimitprom.NewCollector(metrics.Limiter("login", lim), metrics.Middleware(mw))
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	text := gatherText(t, reg)
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool is not installed (apt-get install prometheus): not checking the text with it")
		return
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// TestScrapeWhileDeciding scrapes in a loop while goroutines decide
// (meant for -race): no scrape fails, and the last one counts every
// decision.
func TestScrapeWhileDeciding(t *testing.T) {
	lim, err := shardlimit.New(shardlimit.Config{Algorithm: shardlimit.SlidingCounter, Limit: 500, Window: time.Hour, JanitorInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(shardlimitprom.NewCollector(metrics.Limiter("l", lim)))
	done := make(chan struct{})
	scraped := make(chan error, 1)
	go func() {
		for {
			select {
			case <-done:
				scraped <- nil
				return
			default:
			}
			if _, err := reg.Gather(); err != nil {
				scraped <- err
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 1000 {
				lim.AllowN(string(rune('a'+g))+string(rune('a'+i%3)), t0, 1)
			}
		})
	}
	wg.Wait()
	close(done)
	if err := <-scraped; err != nil {
		t.Fatal(err)
	}
	want := "\n# HELP shardlimit_decisions_total Rate-limit decisions of positive cost, by outcome: allowed, denied, or would_deny (denied, but let through by the middleware's dry run, or by a rule in shadow).\n# TYPE shardlimit_decisions_total counter\n" +
		"shardlimit_decisions_total{limiter=\"l\",outcome=\"allowed\"} 4000\nshardlimit_decisions_total{limiter=\"l\",outcome=\"denied\"} 0\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "shardlimit_decisions_total"); err != nil {
		t.Error(err)
	}
}

// TestTwoMiddlewares exports two middlewares whose rules share names, each
// through a registerer wrapped with a label of its own.
func TestTwoMiddlewares(t *testing.T) {
	_, a := scenario(t)
	_, b := scenario(t)
	reg := prometheus.NewPedanticRegistry()
	prometheus.WrapRegistererWith(prometheus.Labels{"server": "a"}, reg).MustRegister(shardlimitprom.NewCollector(metrics.Middleware(a)))
	prometheus.WrapRegistererWith(prometheus.Labels{"server": "b"}, reg).MustRegister(shardlimitprom.NewCollector(metrics.Middleware(b)))
	if err := reg.Register(shardlimitprom.NewCollector(metrics.Middleware(a))); err == nil {
		t.Error("a second unwrapped collector was registered beside the wrapped ones")
	}
	const want = `
# HELP shardlimit_keys Client keys the limiter stores now (for sync.Exact, its local fallback's).
# TYPE shardlimit_keys gauge
shardlimit_keys{limiter="anon-bar",server="a"} 1
shardlimit_keys{limiter="anon-bar",server="b"} 1
shardlimit_keys{limiter="client-1-foo",server="a"} 1
shardlimit_keys{limiter="client-1-foo",server="b"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "shardlimit_keys"); err != nil {
		t.Error(err)
	}
}
