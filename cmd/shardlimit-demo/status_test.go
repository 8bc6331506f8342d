package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwtest"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// TestDemoStatusListsEveryLimit: /status, the page for people, gives each
// rule's limits; for /baz, limited to 3 a second and 10 a minute, both,
// not only the minute's; /smooth is the seed rules' GCRA rule.
func TestDemoStatusListsEveryLimit(t *testing.T) {
	d := startDemo(t, "-metrics", "127.0.0.1:0")
	d.clock.At(mwtest.Sec(20))
	r := mwtest.NewClient(t, d.obsURL, 1).Get("/status")
	if r.Status != 200 {
		t.Fatalf("/status: %d", r.Status)
	}
	for _, re := range []string{
		`(?m)^baz +- +/baz +fixed_window +3/1s,10/1m +0 +0 +0 `,
		`(?m)^anon-foo +- +/foo +fixed_window +5/1m +0 `,
		`(?m)^smooth +- +/smooth +gcra +6/1m +0 `,
	} {
		if !regexp.MustCompile(re).MatchString(r.Body) {
			t.Errorf("/status does not match %s:\n%s", re, r.Body)
		}
	}
}

// TestDemoStatusNotServedOnPublicAddress: without -metrics and
// -status-public, /status, which lists clients by address and identity,
// is served nowhere: on the public address it is an ordinary path (404);
// /metrics is, as it holds no client key; the startup lines say how to see
// /status.
func TestDemoStatusNotServedOnPublicAddress(t *testing.T) {
	d := startDemo(t)
	c := mwtest.NewClient(t, d.url, 1)
	for range 11 {
		c.Get("/foo", "X-Client-ID", "client-1")
	}
	r := c.Get("/status")
	if r.Status != 404 || strings.Contains(r.Body, "client-1") || strings.Contains(r.Body, "127.0.0.1") {
		t.Errorf("/status on the public address: %d %q, want 404 and no client", r.Status, r.Body)
	}
	if r := c.Get("/metrics"); r.Status != 200 {
		t.Errorf("/metrics on the public address without -metrics: %d, want 200", r.Status)
	}
	if out := d.stdout.String(); !strings.Contains(out, "status: not served") || !strings.Contains(out, "-metrics") {
		t.Errorf("stdout %q does not say /status is not served and how to see it", out)
	}
}

// TestDemoStatusPublicOnlyWhenAsked: -status-public serves /status on the
// public address too, and says so at startup.
func TestDemoStatusPublicOnlyWhenAsked(t *testing.T) {
	d := startDemo(t, "-metrics", "127.0.0.1:0", "-status-public")
	c := mwtest.NewClient(t, d.url, 1)
	for range 6 {
		c.Get("/bar")
	}
	for name, url := range map[string]string{"public": d.url, "-metrics": d.obsURL} {
		if r := mwtest.NewClient(t, url, 1).Get("/status"); r.Status != 200 || !strings.Contains(r.Body, "ip:127.0.0.1") {
			t.Errorf("/status on the %s address with -status-public: %d\n%s", name, r.Status, r.Body)
		}
	}
	if r := c.Get("/metrics"); r.Status != 404 {
		t.Errorf("/metrics on the public address with -metrics: %d, want 404", r.Status)
	}
	if !strings.Contains(d.stdout.String(), "status: also "+d.url+"/status") {
		t.Errorf("stdout %q does not say /status is public", d.stdout)
	}
}

// TestDemoMetricsCarryNoClientKeys denies a listed identity and an
// anonymous address, then checks that /metrics, wherever it is served,
// holds neither, while /status on the admin listener lists both.
func TestDemoMetricsCarryNoClientKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.json")
	rules := `{"rules": [{"name": "anon", "path": "/foo", "limit": 1, "window": "1m"}],
	  "tiers": [{"name": "gold", "clients": ["secret-x9"], "rules": [{"name": "gold-foo", "path": "/foo", "limit": 1, "window": "1m"}]}]}`
	if err := os.WriteFile(path, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"-rules", path}, {"-rules", path, "-metrics", "127.0.0.1:0"}} {
		d := startDemo(t, args...)
		c := mwtest.NewClient(t, d.url, 1)
		for range 3 {
			c.Get("/foo", "X-Client-ID", "secret-x9")
			c.Get("/foo")
		}
		metricsURL := d.url
		if d.obsURL != "" {
			metricsURL = d.obsURL
		}
		r := mwtest.NewClient(t, metricsURL, 1).Get("/metrics")
		if r.Status != 200 || !strings.Contains(r.Body, `shardlimit_decisions_total{limiter="gold-foo",outcome="denied"} 2`) {
			t.Fatalf("%q: /metrics: %d\n%s", args, r.Status, r.Body)
		}
		for _, key := range []string{"secret-x9", "127.0.0.1", "id:", "ip:"} {
			if strings.Contains(r.Body, key) {
				t.Errorf("%q: /metrics holds %q:\n%s", args, key, r.Body)
			}
		}
		if d.obsURL != "" {
			s := mwtest.NewClient(t, d.obsURL, 1).Get("/status")
			if !strings.Contains(s.Body, "id:secret-x9") || !strings.Contains(s.Body, "ip:127.0.0.1") {
				t.Errorf("%q: /status on -metrics does not list the denied clients:\n%s", args, s.Body)
			}
		}
	}
}

// TestDemoStatusShowsGuaranteedCounts: /status lists each denied client
// with its guaranteed count, its count and the count's error.
func TestDemoStatusShowsGuaranteedCounts(t *testing.T) {
	d := startDemo(t, "-metrics", "127.0.0.1:0")
	c := mwtest.NewClient(t, d.url, 1)
	d.clock.At(mwtest.Sec(20))
	for range 5 {
		c.Get("/bar") // anon-bar: 2 a minute, 3 denied
	}
	body := mwtest.NewClient(t, d.obsURL, 1).Get("/status").Body
	for _, re := range []string{
		`(?m)^most denied clients \(3 denials in all; .*GUARANTEED`,
		`(?m)^RULE +KEY +GUARANTEED +DENIED +ERROR$`,
		`(?m)^anon-bar +ip:127\.0\.0\.1 +3 +3 +0$`,
	} {
		if !regexp.MustCompile(re).MatchString(body) {
			t.Errorf("/status does not match %s:\n%s", re, body)
		}
	}
}

// TestDemoSmoothGCRA: the seed rule of /smooth is GCRA, 6 a minute: a
// burst of 6, then one every 10 s.
func TestDemoSmoothGCRA(t *testing.T) {
	d := startDemo(t)
	c := mwtest.NewClient(t, d.url, 1)
	d.clock.At(mwtest.Sec(20))
	for range 6 {
		mwtest.Check(t, "burst", c.Get("/smooth"), 200, mwtest.H{mwtest.XLimit: "6", mwtest.XStrategy: "gcra"})
	}
	mwtest.Check(t, "7th", c.Get("/smooth"), 429, mwtest.H{mwtest.RetryAfter: "10", mwtest.XStrategy: "gcra"})
	d.clock.At(mwtest.Sec(30))
	mwtest.Check(t, "10 s later", c.Get("/smooth"), 200, nil)
	mwtest.Check(t, "and no more", c.Get("/smooth"), 429, mwtest.H{mwtest.RetryAfter: "10"})
}

// TestDemoSmoothExactWithRedis: with -redis the GCRA rule is decided in
// Redis (sync.Exact), which /status shows as the rule's store mode.
func TestDemoSmoothExactWithRedis(t *testing.T) {
	addr := redistest.RequireRedis(t)
	d := startDemo(t, "-redis", addr, "-redis-prefix", redistest.Prefix(t), "-metrics", "127.0.0.1:0")
	c := mwtest.NewClient(t, d.url, 1)
	d.clock.At(mwtest.Sec(20))
	mwtest.Check(t, "/smooth", c.Get("/smooth"), 200, mwtest.H{mwtest.XLimit: "6", mwtest.XStrategy: "gcra"})
	body := mwtest.NewClient(t, d.obsURL, 1).Get("/status").Body
	if !regexp.MustCompile(`(?m)^smooth +exact +healthy +1 calls`).MatchString(body) {
		t.Errorf("/status does not show /smooth decided by sync.Exact:\n%s", body)
	}
}

// TestDemoAlgorithmFlagAppliesToRulesNamingNone: -algorithm decides only
// the rules that name no algorithm, and the startup lines name them (none
// for the seed rules, which all name theirs).
func TestDemoAlgorithmFlagAppliesToRulesNamingNone(t *testing.T) {
	d := startDemo(t, "-algorithm", "gcra")
	if !strings.Contains(d.stdout.String(), "-algorithm gcra: applied to no rule (every rule names its algorithm)") {
		t.Errorf("seed rules: stdout %q", d.stdout)
	}
	mwtest.Check(t, "seed /foo", mwtest.NewClient(t, d.url, 1).Get("/foo"), 200, mwtest.H{mwtest.XStrategy: "fixed_window"})

	path := filepath.Join(t.TempDir(), "rules.json")
	rules := `{"rules": [{"name": "plain", "path": "/foo", "limit": 3, "window": "1m"},
	  {"name": "named", "path": "/bar", "algorithm": "sliding_log", "limit": 3, "window": "1m"}]}`
	if err := os.WriteFile(path, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	d = startDemo(t, "-rules", path, "-algorithm", "gcra")
	if !strings.Contains(d.stdout.String(), "-algorithm gcra: applied to the rules that name none: plain\n") {
		t.Errorf("stdout %q", d.stdout)
	}
	c := mwtest.NewClient(t, d.url, 1)
	mwtest.Check(t, "/foo", c.Get("/foo"), 200, mwtest.H{mwtest.XStrategy: "gcra"})
	mwtest.Check(t, "/bar", c.Get("/bar"), 200, mwtest.H{mwtest.XStrategy: "sliding_log"})
}

// TestStatusFloodShowsNoneCertain feeds the demo's middleware a flood of
// addresses denied once each, far more than the summary tracks, and checks
// that the status page lists none of them; then an address denied in one
// request of ten amid a second flood, which the page lists alone with its
// guaranteed count.
func TestStatusFloodShowsNoneCertain(t *testing.T) {
	rules, err := httplimit.ParseRules([]byte(`{"rules": [{"name": "r", "path": "/x", "limit": 0, "window": "1m"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	mw, err := newMiddleware(rules, shardlimit.FixedWindow, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Close()
	h := mw.Wrap(app)
	get := func(ip string) {
		var req fasthttp.Request
		req.SetRequestURI("http://demo/x")
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP(ip), Port: 1234}, nil)
		h(&ctx)
		if ctx.Response.StatusCode() != 429 {
			t.Fatalf("%s: %d, want 429", ip, ctx.Response.StatusCode())
		}
	}
	page := func() string {
		var b strings.Builder
		writeStatus(&b, mw, "in memory")
		return b.String()
	}
	for i := range 5000 {
		get(fmt.Sprintf("10.0.%d.%d", i/256, i%256))
	}
	if p := page(); !strings.Contains(p, "most denied clients (5000 denials in all;") ||
		!strings.Contains(p, "\nnone certain: ") || strings.Contains(p, "ip:10.") {
		t.Errorf("after a flood of 5000 addresses:\n%s", p)
	}
	for i := range 5000 {
		if i%10 == 0 {
			get("192.0.2.66")
			continue
		}
		get(fmt.Sprintf("10.1.%d.%d", i/256, i%256))
	}
	p := page()
	rows := regexp.MustCompile(`(?m)^r +ip:(\S+) +(\d+) +(\d+) +(\d+)$`).FindAllStringSubmatch(p, -1)
	if len(rows) != 1 || rows[0][1] != "192.0.2.66" {
		t.Fatalf("amid a second flood, want 192.0.2.66 listed alone:\n%s", p)
	}
	g, _ := strconv.Atoi(rows[0][2])
	n, _ := strconv.Atoi(rows[0][3])
	e, _ := strconv.Atoi(rows[0][4])
	if g <= 0 || g > 500 || n < 500 || n-e != g {
		t.Errorf("192.0.2.66, denied 500 times: guaranteed %d, denied %d, error %d", g, n, e)
	}
}
