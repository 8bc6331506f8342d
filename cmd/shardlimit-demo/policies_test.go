package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit/internal/mwengine"
	"github.com/shardlimit/shardlimit/internal/mwtest"
)

// from returns a GET function for base whose connections come from the
// loopback address src (127.0.0.2 is the seed rules' exempt address,
// 127.0.0.3 their denied one); it skips the test if src cannot be bound.
func from(t *testing.T, base, src string) func(path string, hdr ...string) mwtest.Resp {
	t.Helper()
	ln, err := net.Listen("tcp", src+":0")
	if err != nil {
		t.Skipf("cannot bind %s: %v", src, err)
	}
	ln.Close()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	return func(path string, hdr ...string) mwtest.Resp {
		t.Helper()
		req, err := http.NewRequest("GET", base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return mwtest.Resp{Status: res.StatusCode, Header: res.Header, Body: string(b)}
	}
}

// TestDemoPolicies runs the seed rules' policies end to end: the exempt
// address 127.0.0.2 passes twice the anonymous limit of /foo without
// fields, the denied address 127.0.0.3 and identity blocked-client get
// 403 (on every route behind the middleware, one without a rule too), and the shadow rule baz-try (5 a minute) counts its would-denials
// while /baz answers per its enforced rule (3 a second); /status and
// /metrics show the counters.
func TestDemoPolicies(t *testing.T) {
	d := startDemo(t, "-metrics", "127.0.0.1:0")
	d.clock.At(mwtest.Sec(20))
	exempt, denied, local := from(t, d.url, "127.0.0.2"), from(t, d.url, "127.0.0.3"), from(t, d.url, "127.0.0.1")
	for range 10 { // anon-foo allows 5 a minute
		if r := exempt("/foo"); r.Status != 200 || r.Header.Get("X-Ratelimit-Limit") != "" {
			t.Fatalf("exempt 127.0.0.2: %d %v, want 200 without fields", r.Status, r.Header)
		}
	}
	for _, r := range []mwtest.Resp{denied("/foo"), denied("/no-rule-here"), local("/bar", "X-Client-ID", "blocked-client")} {
		if r.Status != 403 || r.Body != mwengine.BodyDenyListed {
			t.Errorf("denied: %d %q, want 403 %q", r.Status, r.Body, mwengine.BodyDenyListed)
		}
	}
	var codes []string
	for range 7 {
		codes = append(codes, http.StatusText(local("/baz").Status))
	}
	if got := strings.Join(codes, ","); got != "OK,OK,OK,Too Many Requests,Too Many Requests,Too Many Requests,Too Many Requests" {
		t.Errorf("/baz answered %s, want 3 OK then 429s: the shadow rule answers nothing", got)
	}
	admin := mwtest.NewClient(t, d.obsURL, 1)
	status := admin.Get("/status").Body
	for _, re := range []string{
		`(?m)^lists: 10 exempt \(passed uncounted\), 3 refused by a deny list \(403\); shadow rules: 5 allowed, 2 would deny$`,
		`(?m)^RULE +TIER +ROUTE +ALGORITHM +LIMIT +ALLOWED +WOULD DENY +KEYS `,
		`(?m)^baz-try +- +/baz +fixed_window +5/1m +5 +2 +1 `,
		`(?m)^baz +- +/baz +fixed_window +3/1s,10/1m +3 +4 +1 `,
	} {
		if !regexp.MustCompile(re).MatchString(status) {
			t.Errorf("/status does not match %s:\n%s", re, status)
		}
	}
	metrics := admin.Get("/metrics").Body
	for _, line := range []string{
		`shardlimit_decisions_total{limiter="baz-try",outcome="allowed"} 5`,
		`shardlimit_decisions_total{limiter="baz-try",outcome="would_deny"} 2`,
		`shardlimit_decisions_total{limiter="baz",outcome="denied"} 4`,
	} {
		if !strings.Contains(metrics, line+"\n") {
			t.Errorf("/metrics lacks %s", line)
		}
	}
}
