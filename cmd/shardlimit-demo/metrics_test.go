package main

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/shardlimit/shardlimit/internal/mwtest"
)

// readmeCurls returns the curl commands of the README's shell blocks, in
// order, as requests: the listener (the demo's 127.0.0.1:8080, or its
// -metrics address 127.0.0.1:9090), path, header pairs and how many times
// (a "for i in $(seq N)" loop).
func readmeCurls(t *testing.T) []curl {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []curl
	inSh := false
	hdrRE := regexp.MustCompile(`-H '([^:']+): ([^']*)'`)
	urlRE := regexp.MustCompile(`http://127\.0\.0\.1:(8080|9090)(/[^\s;'|]*)`)
	seqRE := regexp.MustCompile(`\$\(seq (\d+)\)`)
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "```sh"):
			inSh = true
			continue
		case strings.HasPrefix(line, "```"):
			inSh = false
			continue
		}
		if !inSh || !strings.Contains(line, "curl ") {
			continue
		}
		c := curl{line: line, times: 1}
		m := urlRE.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("README: a curl without a URL of the demo: %s", line)
		}
		c.admin, c.path = m[1] == "9090", m[2]
		for _, h := range hdrRE.FindAllStringSubmatch(line, -1) {
			c.hdr = append(c.hdr, h[1], h[2])
		}
		if s := seqRE.FindStringSubmatch(line); s != nil {
			c.times, _ = strconv.Atoi(s[1])
		}
		out = append(out, c)
	}
	return out
}

// curl is one curl command of the README.
type curl struct {
	line  string
	admin bool // to the -metrics address
	path  string
	hdr   []string
	times int
}

// TestDemoReadmeWalkthroughMetrics replays the README's curl commands
// against the demo started as the README starts it (with -metrics), in
// order, and checks what its /metrics and /status then say: the denials of
// client-1 and of the anonymous client (keyed by address), and the two
// among the most-denied clients.
func TestDemoReadmeWalkthroughMetrics(t *testing.T) {
	d := startDemo(t, "-metrics", "127.0.0.1:0")
	c := mwtest.NewClient(t, d.url, 1)
	admin := mwtest.NewClient(t, d.obsURL, 1)
	d.clock.At(mwtest.Sec(20))
	var metricsBody, statusBody string
	curls := readmeCurls(t)
	for _, cu := range curls {
		for range cu.times {
			cl := c
			if cu.admin {
				cl = admin
			}
			r := cl.Get(cu.path, cu.hdr...)
			switch cu.path {
			case "/metrics":
				metricsBody = r.Body
				if r.Status != 200 || r.Header.Get("Content-Type") != "text/plain; version=0.0.4; charset=utf-8" {
					t.Errorf("/metrics: %d, Content-Type %q", r.Status, r.Header.Get("Content-Type"))
				}
			case "/status":
				statusBody = r.Body
			}
		}
	}
	if metricsBody == "" || statusBody == "" {
		t.Fatalf("the README's curls (%d) do not fetch both /metrics and /status", len(curls))
	}
	for _, line := range []string{
		`shardlimit_decisions_total{limiter="client-1-foo",outcome="allowed"} 10`,
		`shardlimit_decisions_total{limiter="client-1-foo",outcome="denied"} 1`,
		`shardlimit_decisions_total{limiter="anon-bar",outcome="allowed"} 2`,
		`shardlimit_decisions_total{limiter="anon-bar",outcome="denied"} 1`,
		`shardlimit_keys{limiter="anon-bar"} 1`,
		`shardlimit_limiter_info{algorithm="sliding_log",limiter="client-1-bar",store="local"} 1`,
	} {
		if !strings.Contains(metricsBody, line+"\n") {
			t.Errorf("/metrics lacks %s", line)
		}
	}
	for _, re := range []string{
		`(?m)^client-1-foo +client-1 +/foo +fixed_window +10/1m +10 +1 +1 `,
		`(?m)^anon-bar +- +/bar +sliding_log +2/1m +2 +1 +1 `,
		`(?m)^most denied clients \(2 denials in all`,
		`(?m)^(anon-bar +ip:127\.0\.0\.1|client-1-foo +id:client-1) +1 +1 +0$`,
	} {
		if !regexp.MustCompile(re).MatchString(statusBody) {
			t.Errorf("/status does not match %s", re)
		}
	}
	for _, key := range []string{"ip:127.0.0.1", "id:client-1"} {
		if !strings.Contains(statusBody, key) {
			t.Errorf("/status does not list %s among the most denied", key)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s\n/status:\n%s", metricsBody, statusBody)
	}
	promtool(t, metricsBody)
}

// TestDemoMetricsAddress: with -metrics, /metrics and /status are served
// on that admin listener; on the public one they are ordinary paths (404).
func TestDemoMetricsAddress(t *testing.T) {
	d := startDemo(t, "-metrics", "127.0.0.1:0")
	if d.obsURL == "" {
		t.Fatal("no -metrics address reported")
	}
	c := mwtest.NewClient(t, d.url, 1)
	c.Get("/foo", "X-Client-ID", "client-2")
	for _, p := range []string{"/metrics", "/status"} {
		if r := c.Get(p); r.Status != 404 {
			t.Errorf("%s on the main address: %d, want 404", p, r.Status)
		}
	}
	o := mwtest.NewClient(t, d.obsURL, 1)
	if r := o.Get("/metrics"); r.Status != 200 || !strings.Contains(r.Body, `shardlimit_decisions_total{limiter="client-2-foo",outcome="allowed"} 1`) {
		t.Errorf("/metrics on -metrics: %d\n%s", r.Status, r.Body)
	}
	if r := o.Get("/status"); r.Status != 200 || !strings.Contains(r.Body, "client-2-foo") {
		t.Errorf("/status on -metrics: %d\n%s", r.Status, r.Body)
	}
	if r := o.Get("/foo"); r.Status != 404 {
		t.Errorf("/foo on -metrics: %d, want 404", r.Status)
	}
	if !strings.Contains(d.stdout.String(), "metrics: "+d.obsURL+"/metrics") {
		t.Errorf("stdout %q does not say where the metrics are", d.stdout)
	}
}

// promtool has promtool check the text if it is installed (Debian package
// prometheus; .ci/run installs it) and says so if not.
func promtool(t *testing.T, text string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool is not installed (apt-get install prometheus): not checking /metrics with it")
		return
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// TestDemoMetricsGroup: -metrics-group=all sums every rule into one
// series set on /metrics, tier into one per client tier.
func TestDemoMetricsGroup(t *testing.T) {
	for _, tc := range []struct {
		group string
		want  []string
	}{
		{"all", []string{
			`shardlimit_decisions_total{limiter="all",outcome="allowed"} 2`,
			`shardlimit_group_rules{limiter="all"} `,
		}},
		{"tier", []string{
			`shardlimit_decisions_total{limiter="tier:client-2",outcome="allowed"} 1`,
			`shardlimit_decisions_total{limiter="default",outcome="allowed"} 1`,
		}},
	} {
		d := startDemo(t, "-metrics", "127.0.0.1:0", "-metrics-group", tc.group)
		c := mwtest.NewClient(t, d.url, 1)
		c.Get("/foo", "X-Client-ID", "client-2")
		c.Get("/bar")
		r := mwtest.NewClient(t, d.obsURL, 1).Get("/metrics")
		for _, line := range tc.want {
			if !strings.Contains(r.Body, line) {
				t.Errorf("-metrics-group=%s: /metrics lacks %s", tc.group, line)
			}
		}
		if strings.Contains(r.Body, `limiter="client-2-foo"`) {
			t.Errorf("-metrics-group=%s: a rule's own series on /metrics", tc.group)
		}
		if t.Failed() {
			t.Logf("/metrics:\n%s", r.Body)
		}
		promtool(t, r.Body)
	}
}
