package metrics_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/httpmw"
	"github.com/shardlimit/shardlimit/internal/mwtest"
	"github.com/shardlimit/shardlimit/metrics"
)

var nameRE = regexp.MustCompile(`^shardlimit_[a-z_]+[a-z]$`)

// TestFamilies checks the families against the Prometheus naming
// conventions: a prefix, counters ending in _total and gauges not, the
// base unit in the name where there is one, labels that start with
// limiter, one-line help.
func TestFamilies(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range metrics.Families() {
		if !nameRE.MatchString(f.Name) || seen[f.Name] {
			t.Errorf("%q: bad or repeated name", f.Name)
		}
		seen[f.Name] = true
		if (f.Type == metrics.Counter) != strings.HasSuffix(f.Name, "_total") {
			t.Errorf("%s: a %v; counters, and only they, end in _total", f.Name, f.Type)
		}
		base := strings.TrimSuffix(f.Name, "_total")
		if (f.Unit == "s") != strings.HasSuffix(base, "_seconds") {
			t.Errorf("%s: unit %q; seconds, and only they, end in _seconds", f.Name, f.Unit)
		}
		if f.Unit != "" && f.Unit != "s" && !regexp.MustCompile(`^\{[a-z]+\}$`).MatchString(f.Unit) {
			t.Errorf("%s: unit %q is neither s nor an annotation", f.Name, f.Unit)
		}
		if len(f.Labels) == 0 || f.Labels[0] != "limiter" || slices.Contains(f.Labels, "key") {
			t.Errorf("%s: labels %q", f.Name, f.Labels)
		}
		if f.Help == "" || strings.ContainsAny(f.Help, "\n\\") || !strings.HasSuffix(f.Help, ".") {
			t.Errorf("%s: help %q", f.Name, f.Help)
		}
	}
}

// scenario builds a standalone limiter and an HTTP middleware served on
// loopback, and sends them a known sequence of decisions and requests.
func scenario(t *testing.T) (shardlimit.Limiter, *httpmw.Middleware, *httpmw.Middleware) {
	t.Helper()
	clock := shardlimit.NewManualClock(mwtest.T0)
	lim, err := shardlimit.New(shardlimit.Config{
		Algorithm: shardlimit.SlidingLog, Limit: 2, Window: time.Minute,
		Shards: 1, MaxKeys: 2, JanitorInterval: -1, Clock: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	for _, key := range []string{"a", "a", "a", "b", "c"} { // 3 allowed, 1 denied, c refused
		lim.AllowN(key, mwtest.T0, 1)
	}

	rules := mwtest.MustRules(t, `{"rules": [
		{"name": "anon-bar", "path": "/bar", "algorithm": "sliding_log", "limit": 2, "window": "1m"}
	], "tiers": [{"name": "client-1", "clients": ["client-1"], "rules": [
		{"name": "client-1-foo", "path": "/foo", "limit": 3, "window": "1m"}
	]}]}`)
	opts := httplimit.Options{Rules: rules, Keys: httplimit.KeyConfig{Header: "X-Client-ID"}, Clock: clock}
	mw, err := httpmw.New(httpmw.Config{Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mw.Close() })
	opts.DryRun = true
	opts.Rules = mwtest.MustRules(t, `{"rules": [{"name": "shadow", "path": "/bar", "limit": 1, "window": "1h"}]}`)
	shadow, err := httpmw.New(httpmw.Config{Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shadow.Close() })
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	srv := httptest.NewServer(mw.Wrap(shadow.Wrap(ok)))
	t.Cleanup(srv.Close)
	c := mwtest.NewClient(t, srv.URL, 1)
	for range 5 { // 3 allowed, 2 denied
		c.Get("/foo", "X-Client-ID", "client-1")
	}
	for range 4 { // 2 allowed, 2 denied; the shadow rule: 1 allowed, 1 would deny
		c.Get("/bar")
	}
	return lim, mw, shadow
}

// wantText is what WriteText writes after scenario.
const wantText = `# HELP shardlimit_decisions_total Rate-limit decisions of positive cost, by outcome: allowed, denied, or would_deny (denied, but let through by the middleware's dry run, or by a rule in shadow).
# TYPE shardlimit_decisions_total counter
shardlimit_decisions_total{limiter="anon-bar",outcome="allowed"} 2
shardlimit_decisions_total{limiter="anon-bar",outcome="denied"} 2
shardlimit_decisions_total{limiter="client-1-foo",outcome="allowed"} 3
shardlimit_decisions_total{limiter="client-1-foo",outcome="denied"} 2
shardlimit_decisions_total{limiter="login",outcome="allowed"} 3
shardlimit_decisions_total{limiter="login",outcome="denied"} 1
shardlimit_decisions_total{limiter="shadow",outcome="allowed"} 1
shardlimit_decisions_total{limiter="shadow",outcome="would_deny"} 1
# HELP shardlimit_errors_total Requests an HTTP middleware rule matched but did not decide, by kind: too_many_keys (the rule's table was full), invalid (key or instant refused), closed (limiter closed), other (the limiter's own error), answered per the error policy; bad_cost (negative cost, answered 500); no_identity (no client identity, answered 400).
# TYPE shardlimit_errors_total counter
shardlimit_errors_total{kind="bad_cost",limiter="anon-bar"} 0
shardlimit_errors_total{kind="bad_cost",limiter="client-1-foo"} 0
shardlimit_errors_total{kind="bad_cost",limiter="shadow"} 0
shardlimit_errors_total{kind="closed",limiter="anon-bar"} 0
shardlimit_errors_total{kind="closed",limiter="client-1-foo"} 0
shardlimit_errors_total{kind="closed",limiter="shadow"} 0
shardlimit_errors_total{kind="invalid",limiter="anon-bar"} 0
shardlimit_errors_total{kind="invalid",limiter="client-1-foo"} 0
shardlimit_errors_total{kind="invalid",limiter="shadow"} 0
shardlimit_errors_total{kind="no_identity",limiter="anon-bar"} 0
shardlimit_errors_total{kind="no_identity",limiter="client-1-foo"} 0
shardlimit_errors_total{kind="no_identity",limiter="shadow"} 0
shardlimit_errors_total{kind="other",limiter="anon-bar"} 0
shardlimit_errors_total{kind="other",limiter="client-1-foo"} 0
shardlimit_errors_total{kind="other",limiter="shadow"} 0
shardlimit_errors_total{kind="too_many_keys",limiter="anon-bar"} 0
shardlimit_errors_total{kind="too_many_keys",limiter="client-1-foo"} 0
shardlimit_errors_total{kind="too_many_keys",limiter="shadow"} 0
# HELP shardlimit_keys Client keys the limiter stores now (for sync.Exact, its local fallback's).
# TYPE shardlimit_keys gauge
shardlimit_keys{limiter="anon-bar"} 1
shardlimit_keys{limiter="client-1-foo"} 1
shardlimit_keys{limiter="login"} 2
shardlimit_keys{limiter="shadow"} 1
# HELP shardlimit_keys_evicted_total Client keys removed from the limiter's table: idle ones by the janitor, or to make room in a full table.
# TYPE shardlimit_keys_evicted_total counter
shardlimit_keys_evicted_total{limiter="anon-bar"} 0
shardlimit_keys_evicted_total{limiter="client-1-foo"} 0
shardlimit_keys_evicted_total{limiter="login"} 0
shardlimit_keys_evicted_total{limiter="shadow"} 0
# HELP shardlimit_keys_refused_total Decisions for a new client key that the full table could not store (refused with ErrTooManyKeys).
# TYPE shardlimit_keys_refused_total counter
shardlimit_keys_refused_total{limiter="anon-bar"} 0
shardlimit_keys_refused_total{limiter="client-1-foo"} 0
shardlimit_keys_refused_total{limiter="login"} 1
shardlimit_keys_refused_total{limiter="shadow"} 0
# HELP shardlimit_limit Default limit of the limiter's keys (those without a limit of their own), in requests or cost units per window.
# TYPE shardlimit_limit gauge
shardlimit_limit{limiter="anon-bar"} 2
shardlimit_limit{limiter="client-1-foo"} 3
shardlimit_limit{limiter="login"} 2
shardlimit_limit{limiter="shadow"} 1
# HELP shardlimit_limiter_info Always 1: a limiter (for HTTP middleware, a rule, or a group of rules with one series for each algorithm and store among them) with its algorithm and where its counts live: local (this process), shared (sync.Shared: this process, shared through a store) or exact (sync.Exact: the store).
# TYPE shardlimit_limiter_info gauge
shardlimit_limiter_info{algorithm="fixed_window",limiter="client-1-foo",store="local"} 1
shardlimit_limiter_info{algorithm="fixed_window",limiter="shadow",store="local"} 1
shardlimit_limiter_info{algorithm="sliding_log",limiter="anon-bar",store="local"} 1
shardlimit_limiter_info{algorithm="sliding_log",limiter="login",store="local"} 1
# HELP shardlimit_window_seconds Window of the limiter's limit, in seconds.
# TYPE shardlimit_window_seconds gauge
shardlimit_window_seconds{limiter="anon-bar"} 60
shardlimit_window_seconds{limiter="client-1-foo"} 60
shardlimit_window_seconds{limiter="login"} 60
shardlimit_window_seconds{limiter="shadow"} 3600
`

// TestWriteText checks every line written after a known sequence of
// decisions, and has promtool check the result where it is installed.
func TestWriteText(t *testing.T) {
	lim, mw, shadow := scenario(t)
	var buf bytes.Buffer
	if err := metrics.WriteText(&buf, metrics.Limiter("login", lim), metrics.Middleware(mw), metrics.Middleware(shadow)); err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); got != wantText {
		t.Errorf("WriteText wrote\n%s\nwant\n%s", got, wantText)
	}
	promtoolCheck(t, buf.Bytes())
	top, total := mw.TopDenied(0)
	if total != 4 || len(top) != 2 || top[0].Key != "id:client-1" && top[1].Key != "id:client-1" {
		t.Errorf("TopDenied = %v, %d", top, total)
	}
}

// promtoolCheck runs promtool check metrics on text if promtool is
// installed (the Debian package prometheus has it; .ci/run installs it),
// and skips that check with a message otherwise.
func promtoolCheck(t *testing.T, text []byte) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool is not installed (apt-get install prometheus): not checking the text with it")
		return
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = bytes.NewReader(text)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// TestWriteTextEscapes checks label values and refusals: quotes,
// backslashes and newlines are escaped; one name collected twice is an
// error and nothing is written.
func TestWriteTextEscapes(t *testing.T) {
	lim, err := shardlimit.New(shardlimit.Config{Algorithm: shardlimit.GCRA, Limit: 1, Window: time.Second, JanitorInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	var buf bytes.Buffer
	if err := metrics.WriteText(&buf, metrics.Limiter("a\"b\\c\nd", lim)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `shardlimit_limit{limiter="a\"b\\c\nd"} 1`+"\n") {
		t.Errorf("escaping:\n%s", buf.String())
	}
	promtoolCheck(t, buf.Bytes())
	buf.Reset()
	err = metrics.WriteText(&buf, metrics.Limiter("x", lim), metrics.Limiter("x", lim))
	if err == nil || !strings.Contains(err.Error(), "collected twice") || buf.Len() != 0 {
		t.Errorf("a name used twice: %v, wrote %q", err, buf.String())
	}
}
