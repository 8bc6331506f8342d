// Package mwtest is the end-to-end test suite shared by the fasthttpmw and
// httpmw middlewares: each package supplies a Harness that starts its real
// server on an ephemeral loopback port, and runs scenarios in which
// real limiters failed, and the acceptance tests against it with a real net/http
// client and an injected shardlimit.ManualClock.
//
// Clients other than the loopback peer are simulated with X-Forwarded-For
// from a trusted loopback proxy (Loopback), since a test cannot connect from
// 192.0.2.x; the untrusted case is tested separately.
package mwtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// T0 is the cases' origin: a Unix instant that is a multiple of
// every window used.
var T0 = time.Unix(1_734_480_000, 0)

// Loopback are the trusted proxy networks that let a test client speak for
// any client address through X-Forwarded-For.
var Loopback = []string{"127.0.0.1/32", "::1/128"}

// Setup describes the middleware a case needs.
type Setup struct {
	// Options are the shared options (rules, keys, headers, clock...).
	Options httplimit.Options
	// IPv6 asks for a listener on [::1] (the harness falls back to
	// 127.0.0.1 and logs it if IPv6 is unavailable).
	IPv6 bool
	// CostHeader makes the request cost the integer in header X-Cost (1 if
	// absent).
	CostHeader bool
	// KeyFuncHeader, if set, installs a key function returning that
	// header's value.
	KeyFuncHeader string
	// SkipPath, if set, installs a skip function for that exact path.
	SkipPath string
	// CustomDenied installs a denied handler answering 429 with header
	// X-Denied-By: custom and body "custom denied\n".
	CustomDenied bool
	// TierHeader, if set, installs a tier hook returning that header's
	// value (standing for a claim the application verified).
	TierHeader string
	// ErrorStatus, if set, installs an error hook returning its result
	// for the decision's error.
	ErrorStatus func(err error) int
	// App makes the application the outcome application: it answers
	// the status of request field AppStatus, reports the cost of
	// AppReportCost in its response field AppCostField and panics on
	// AppPanic (see OutcomeCases).
	App bool
	// FinalCostField, if set, installs the middleware's final cost hook,
	// returning ParseReportedCost of the response field of that name.
	FinalCostField string
}

// Target is a running server.
type Target struct {
	// URL is the server's base URL, e.g. "http://127.0.0.1:41234".
	URL string
	// Reload, Stats and Close call the middleware's methods.
	Reload func(*httplimit.Rules) error
	// Stats returns the middleware's counters.
	Stats func() httplimit.Stats
	// RuleStats returns the middleware's rules with their counters.
	RuleStats func() []httplimit.RuleStats
	// Close closes the middleware (not the server).
	Close func() error
	// IPv6 reports whether the server listens on [::1].
	IPv6 bool
}

// Harness starts one middleware's real server.
type Harness struct {
	// Start starts a server for s, registering its shutdown with
	// t.Cleanup. The application handler answers 200 "ok\n".
	Start func(t *testing.T, s Setup) *Target
	// SurvivesPanics reports whether the server survives a panicking
	// handler (net/http's does, closing the connection; fasthttp's does
	// not recover).
	SurvivesPanics bool
}

// Listen returns a loopback listener on an ephemeral port: [::1] if ipv6
// and available, else 127.0.0.1.
func Listen(t *testing.T, ipv6 bool) (net.Listener, bool) {
	t.Helper()
	if ipv6 {
		ln, err := net.Listen("tcp6", "[::1]:0")
		if err == nil {
			return ln, true
		}
		t.Logf("IPv6 loopback unavailable (%v); using 127.0.0.1", err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln, false
}

// Resp is one response.
type Resp struct {
	Status int         // status code
	Header http.Header // response header
	Body   string      // response body
}

// Client is a real HTTP client for one target, closed at the end of the
// test.
type Client struct {
	t    *testing.T
	base string
	hc   *http.Client
}

// NewClient returns a client of base with up to conns connections.
func NewClient(t *testing.T, base string, conns int) *Client {
	tr := &http.Transport{
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		MaxConnsPerHost:     conns,
		DisableCompression:  true,
		IdleConnTimeout:     time.Minute,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &Client{t: t, base: base, hc: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

// Get sends GET path with header name/value pairs hdr and returns the
// response; it fails the test on a transport error.
func (c *Client) Get(path string, hdr ...string) Resp {
	c.t.Helper()
	r, err := c.Do("GET", path, hdr...)
	if err != nil {
		c.t.Fatalf("GET %s: %v", path, err)
	}
	return r
}

// Do sends one request.
func (c *Client) Do(method, path string, hdr ...string) (Resp, error) {
	req, err := http.NewRequest(method, c.base+path, nil)
	if err != nil {
		return Resp{}, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	res, err := c.hc.Do(req)
	if err != nil {
		return Resp{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return Resp{}, err
	}
	return Resp{Status: res.StatusCode, Header: res.Header, Body: string(b)}, nil
}

// H lists expected header values; Absent requires a field to be missing.
type H map[string]string

// Absent is the H value of a field that must not be present.
const Absent = "\x00absent"

// Header names as the tests spell them (lookups are case-insensitive).
const (
	XLimit     = "X-RateLimit-Limit"
	XRemaining = "X-RateLimit-Remaining"
	XReset     = "X-RateLimit-Reset"
	XWindowMs  = "X-RateLimit-Window-Ms"
	XStrategy  = "X-RateLimit-Strategy"
	RLPolicy   = "RateLimit-Policy"
	RL         = "RateLimit"
	RetryAfter = "Retry-After"
)

var (
	delaySeconds = regexp.MustCompile(`^[1-9][0-9]*$`)
	nonNegInt    = regexp.MustCompile(`^(0|[1-9][0-9]*)$`)
)

// Policy is one item of a RateLimit-Policy field.
type Policy struct {
	Name string // the policy name
	Q, W int64  // the quota and the window in seconds
}

// Service is one item of a RateLimit field.
type Service struct {
	Name string // the policy name
	R, T int64  // the remaining quota and the seconds until it resets
}

// ParseIETF parses the RateLimit-Policy and RateLimit fields of h (each
// absent, or present once) as structured field Lists (RFC 9651, with
// github.com/dunglas/httpsfv, so strictly as a client library would read
// them, not by a pattern) and checks them against
// draft-ietf-httpapi-ratelimit-headers-11 as the middleware sends them:
// non-empty Lists of Items whose values are Strings, RateLimit-Policy's
// with distinct names, an Integer q >= 0 and w > 0, RateLimit's with an
// Integer r >= 0 and t >= 0, naming a policy of RateLimit-Policy when
// both are present, and no other parameter.
func ParseIETF(h http.Header) ([]Policy, []Service, error) {
	pf, err := parseField(h, RLPolicy, []string{"q", "w"}, []int64{0, 1})
	if err != nil {
		return nil, nil, err
	}
	var pols []Policy
	for i, n := range pf.names {
		if slices.Contains(pf.names[:i], n) {
			return nil, nil, fmt.Errorf("%s %q: policy %q listed twice", RLPolicy, pf.v, n)
		}
		pols = append(pols, Policy{Name: n, Q: pf.nums[i][0], W: pf.nums[i][1]})
	}
	sf, err := parseField(h, RL, []string{"r", "t"}, []int64{0, 0})
	if err != nil {
		return nil, nil, err
	}
	var svcs []Service
	for i, n := range sf.names {
		if pols != nil && !slices.ContainsFunc(pols, func(p Policy) bool { return p.Name == n }) {
			return nil, nil, fmt.Errorf("%s %q: policy %q is not in %s", RL, sf.v, n, RLPolicy)
		}
		svcs = append(svcs, Service{Name: n, R: sf.nums[i][0], T: sf.nums[i][1]})
	}
	return pols, svcs, nil
}

// ietfField is a rate-limit field as parseField reads it: its value, and
// each member's name and Integer parameters.
type ietfField struct {
	v     string
	names []string
	nums  [][]int64
}

// parseField parses field name of h, if present (once), as a non-empty
// List whose members are String Items with exactly the Integer
// parameters want, each at least min; an absent field has no members.
func parseField(h http.Header, name string, want []string, min []int64) (ietfField, error) {
	vs := h.Values(name)
	if len(vs) > 1 {
		return ietfField{}, fmt.Errorf("%s sent %d times", name, len(vs))
	}
	if len(vs) == 0 {
		return ietfField{}, nil
	}
	f := ietfField{v: vs[0]}
	list, err := httpsfv.UnmarshalList(vs)
	if err != nil {
		return f, fmt.Errorf("%s %q: %w", name, f.v, err)
	}
	if len(list) == 0 {
		return f, fmt.Errorf("%s %q: an empty list", name, f.v)
	}
	for _, m := range list {
		it, _ := m.(httpsfv.Item)
		s, ok := it.Value.(string)
		if !ok {
			return f, fmt.Errorf("%s %q: member %v is not a String Item", name, f.v, m)
		}
		if got := it.Params.Names(); len(got) != len(want) {
			return f, fmt.Errorf("%s %q: member %q has parameters %v, want %v", name, f.v, s, got, want)
		}
		var ns []int64
		for i, k := range want {
			pv, _ := it.Params.Get(k)
			n, ok := pv.(int64)
			if !ok || n < min[i] {
				return f, fmt.Errorf("%s %q: member %q: %s = %v, want an Integer >= %d", name, f.v, s, k, pv, min[i])
			}
			ns = append(ns, n)
		}
		f.names, f.nums = append(f.names, s), append(f.nums, ns)
	}
	return f, nil
}

// Check asserts r's status and headers, and the invariants every response
// must keep: integer fields, remaining within [0, limit],
// Retry-After only on 429 and a positive integer, the middleware's own
// answers text/plain and nosniff.
func Check(t *testing.T, step string, r Resp, status int, want H) {
	t.Helper()
	if r.Status != status {
		t.Errorf("%s: status %d, want %d (body %q)", step, r.Status, status, r.Body)
	}
	for name, v := range want {
		got, ok := r.Header[http.CanonicalHeaderKey(name)]
		switch {
		case v == Absent && ok:
			t.Errorf("%s: %s = %q, want absent", step, name, got)
		case v != Absent && !ok:
			t.Errorf("%s: %s absent, want %q", step, name, v)
		case v != Absent && (len(got) != 1 || got[0] != v):
			t.Errorf("%s: %s = %q, want %q", step, name, got, v)
		}
	}
	CheckInvariants(t, step, r)
}

// CheckInvariants asserts the format rules of every rate-limit field.
func CheckInvariants(t *testing.T, step string, r Resp) {
	t.Helper()
	checkXFields(t, step, r.Header)
	checkIETFFields(t, step, r.Header)
	checkRetryAfter(t, step, r)
	checkOwnAnswer(t, step, r)
}

// checkXFields checks that the X-RateLimit fields are non-negative
// integers, remaining at most the limit.
func checkXFields(t *testing.T, step string, h http.Header) {
	t.Helper()
	for _, name := range []string{XLimit, XRemaining, XReset, XWindowMs} {
		if v := h.Get(name); v != "" && !nonNegInt.MatchString(v) {
			t.Errorf("%s: %s = %q, not a non-negative integer", step, name, v)
		}
	}
	if l, rem := h.Get(XLimit), h.Get(XRemaining); l != "" && rem != "" {
		li, _ := strconv.Atoi(l)
		ri, _ := strconv.Atoi(rem)
		if ri > li {
			t.Errorf("%s: remaining %d above limit %d", step, ri, li)
		}
	}
}

// checkIETFFields checks the IETF fields (ParseIETF), and that RateLimit
// names the binding policy, whose numbers the X-RateLimit fields report
// too.
func checkIETFFields(t *testing.T, step string, h http.Header) {
	t.Helper()
	pols, svcs, err := ParseIETF(h)
	if err != nil {
		t.Errorf("%s: %v", step, err)
	}
	if len(svcs) == 1 && h.Get(XLimit) != "" && h.Get(XRemaining) != "" {
		i := slices.IndexFunc(pols, func(p Policy) bool { return p.Name == svcs[0].Name })
		if i >= 0 && strconv.FormatInt(pols[i].Q, 10) != h.Get(XLimit) || strconv.FormatInt(svcs[0].R, 10) != h.Get(XRemaining) {
			t.Errorf("%s: RateLimit %q and RateLimit-Policy %q disagree with X-RateLimit-Limit %s, -Remaining %s",
				step, h.Get(RL), h.Get(RLPolicy), h.Get(XLimit), h.Get(XRemaining))
		}
	}
}

// checkRetryAfter checks that Retry-After comes only on a 429, once, in
// delay-seconds.
func checkRetryAfter(t *testing.T, step string, r Resp) {
	t.Helper()
	ra, has := r.Header[RetryAfter]
	if has && r.Status != http.StatusTooManyRequests {
		t.Errorf("%s: Retry-After %q on a %d", step, ra, r.Status)
	}
	if has && (len(ra) != 1 || !delaySeconds.MatchString(ra[0])) {
		t.Errorf("%s: Retry-After %q is not RFC 9110 delay-seconds", step, ra)
	}
}

// checkOwnAnswer checks that the middleware's own answers (429, 400, 403, 500,
// 503: the applications of the tests never answer these), unless by a
// custom denied handler, are text/plain and nosniff.
func checkOwnAnswer(t *testing.T, step string, r Resp) {
	t.Helper()
	h := r.Header
	switch r.Status {
	case http.StatusTooManyRequests, http.StatusBadRequest, http.StatusForbidden, http.StatusInternalServerError, http.StatusServiceUnavailable:
	default:
		return
	}
	if h.Get("X-Denied-By") != "" {
		return
	}
	if !strings.HasPrefix(h.Get("Content-Type"), "text/plain") || h.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("%s: %d with Content-Type %q, X-Content-Type-Options %q; want text/plain, nosniff",
			step, r.Status, h.Get("Content-Type"), h.Get("X-Content-Type-Options"))
	}
}

// Clock is a ManualClock set in offsets from T0.
type Clock struct{ *shardlimit.ManualClock }

// NewClock returns a clock reading T0.
func NewClock() Clock { return Clock{shardlimit.NewManualClock(T0)} }

// At sets the clock to T0 + d.
func (c Clock) At(d time.Duration) { c.Set(T0.Add(d)) }

// Sec returns s seconds.
func Sec(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// MustRules parses rules JSON.
func MustRules(t testing.TB, js string) *httplimit.Rules {
	t.Helper()
	r, err := httplimit.ParseRules([]byte(js))
	if err != nil {
		t.Fatalf("rules: %v", err)
	}
	return r
}

// MustRulesUnchecked decodes rules JSON without validating it, for rule
// sets a test expects Reload to refuse.
func MustRulesUnchecked(t testing.TB, js string) *httplimit.Rules {
	t.Helper()
	var r httplimit.Rules
	if err := json.Unmarshal([]byte(js), &r); err != nil {
		t.Fatalf("rules: %v", err)
	}
	return &r
}

// OneRule returns rules with one catch-all rule "r" of the algorithm named
// alg ("fixed_window", "sliding_log", "sliding_counter"), limit and window,
// plus extra JSON members (e.g. `"overrides": [...]`).
func OneRule(t *testing.T, alg string, limit int, window string, buckets int, extra string) *httplimit.Rules {
	t.Helper()
	b := ""
	if buckets > 0 {
		b = fmt.Sprintf(`, "buckets": %d`, buckets)
	}
	if extra != "" {
		extra = ", " + extra
	}
	return MustRules(t, fmt.Sprintf(`{"rules": [{"name": "r", "algorithm": %q, "limit": %d, "window": %q%s}]%s}`,
		alg, limit, window, b, extra))
}

// XFF returns the header pair that makes a request come from client ip
// through the trusted loopback proxy.
func XFF(ip string) []string { return []string{"X-Forwarded-For", ip} }

// step is one expected decision: allowed with remaining Rem, or denied with
// Retry-After RA (0: absent).
type step struct {
	allowed bool
	rem     int
	ra      int
}

// A is an allowed step with remaining rem.
func A(rem int) step { return step{allowed: true, rem: rem} }

// D is a denied step with Retry-After ra (0: absent) and remaining 0.
func D(ra int) step { return step{ra: ra} }

// expectStep checks r against s.
func expectStep(t *testing.T, name string, r Resp, s step) {
	t.Helper()
	if s.allowed {
		Check(t, name, r, 200, H{XRemaining: strconv.Itoa(s.rem), RetryAfter: Absent})
		return
	}
	ra := Absent
	if s.ra > 0 {
		ra = strconv.Itoa(s.ra)
	}
	Check(t, name, r, 429, H{XRemaining: "0", RetryAfter: ra})
}
