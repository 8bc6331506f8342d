package mwtest

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// The request header fields the outcome application (Setup.App) obeys,
// and the response field it reports a cost in.
const (
	// AppStatus: the status to answer (default 200).
	AppStatus = "X-Status"
	// AppReportCost: a value the application sets in its response's
	// AppCostField, as a handler reports the final cost of a request.
	AppReportCost = "X-Report-Cost"
	// AppPanic: "1" panics with a plain value, "abort" with
	// http.ErrAbortHandler (both after setting the status header, before
	// writing a body).
	AppPanic = "X-Panic"
	// AppCostField is the response field the application reports a cost
	// in.
	AppCostField = "X-Cost"
)

// OutcomeCases are the scenarios of counting by outcome and settling a
// final cost after the handler (Rule.Count, Rule.CostHeader, the final
// cost hooks). The end-to-end ones run with the middleware's own
// limiters; OutcomePlumbing checks what
// the middleware asks of a limiter's Settle through a recording limiter.
var OutcomeCases = []Case{
	{"OutcomeFailedOnly", OutcomeFailedOnly},
	{"OutcomeSuccessfulOnly", OutcomeSuccessfulOnly},
	{"OutcomeCostHeader", func(t *testing.T, h Harness) { OutcomeCost(t, h, false) }},
	{"OutcomeCostHook", func(t *testing.T, h Harness) { OutcomeCost(t, h, true) }},
	{"OutcomePanics", OutcomePanics},
	{"OutcomePlumbing", OutcomePlumbing},
}

// init adds OutcomeCases to Cases (in this file, so that cases others add
// to Cases do not touch the same lines).
func init() { Cases = append(Cases, OutcomeCases...) }

// outcomeReq returns the request fields of a request from client ip that
// the application answers with status, reporting cost (if not "").
func outcomeReq(ip string, status int, cost string) []string {
	hdr := append(XFF(ip), AppStatus, strconv.Itoa(status))
	if cost != "" {
		hdr = append(hdr, AppReportCost, cost)
	}
	return hdr
}

// checkSettled checks the middleware's settlement counters.
func checkSettled(t *testing.T, tg *Target, want httplimit.SettleStats) {
	t.Helper()
	if got := tg.Stats().Settled; got != want {
		t.Errorf("Stats.Settled = %+v, want %+v", got, want)
	}
}

// OutcomeFailedOnly — a rule counting only failed responses: ten
// successes of one client pass under a limit of 3 (each refunded after
// the handler, its fields showing the decision made before it: 2
// remaining), and the client may then still fail 3 times before a 429,
// which then answers every request, successful or not, until the window
// ends. Under Options.FailedResponse (5xx only), 404s do not count.
func OutcomeFailedOnly(t *testing.T, h Harness) {
	for _, alg := range []string{"fixed_window", "sliding_log", "gcra"} {
		t.Run(alg, func(t *testing.T) {
			clock := NewClock()
			tg := h.Start(t, Setup{App: true, Options: httplimit.Options{
				Rules: MustRules(t, fmt.Sprintf(`{"rules": [{"name": "login", "algorithm": %q, "limit": 3, "window": "1m", "count": "failed"}]}`, alg)),
				Keys:  httplimit.KeyConfig{TrustedProxies: Loopback},
				Clock: clock,
			}})
			c := NewClient(t, tg.URL, 1)
			for i := range 10 {
				clock.At(Sec(float64(i)))
				Check(t, fmt.Sprintf("success %d", i), c.Get("/login", outcomeReq("192.0.2.20", 200, "")...), 200, H{XRemaining: "2"})
			}
			for i := range 3 {
				Check(t, fmt.Sprintf("failure %d", i), c.Get("/login", outcomeReq("192.0.2.20", 401, "")...), 401, H{XRemaining: strconv.Itoa(2 - i)})
			}
			Check(t, "failure 4", c.Get("/login", outcomeReq("192.0.2.20", 401, "")...), 429, H{XRemaining: "0"})
			Check(t, "success at the limit", c.Get("/login", outcomeReq("192.0.2.20", 200, "")...), 429, H{XRemaining: "0"})
			checkSettled(t, tg, httplimit.SettleStats{Refunded: 10})
		})
	}
	t.Run("FailedResponse", func(t *testing.T) {
		tg := h.Start(t, Setup{App: true, Options: httplimit.Options{
			Rules:          MustRules(t, `{"rules": [{"name": "r", "limit": 1, "window": "1m", "count": "failed"}]}`),
			Keys:           httplimit.KeyConfig{TrustedProxies: Loopback},
			Clock:          NewClock(),
			FailedResponse: func(_ httplimit.Decision, status int) bool { return status >= 500 },
		}})
		c := NewClient(t, tg.URL, 1)
		for i := range 3 {
			Check(t, fmt.Sprintf("404 %d", i), c.Get("/", outcomeReq("192.0.2.21", 404, "")...), 404, H{XRemaining: "0"})
		}
		Check(t, "500", c.Get("/", outcomeReq("192.0.2.21", 500, "")...), 500, H{XRemaining: "0"})
		Check(t, "after the 500", c.Get("/", outcomeReq("192.0.2.21", 404, "")...), 429, nil)
		checkSettled(t, tg, httplimit.SettleStats{Refunded: 3})
	})
}

// OutcomeSuccessfulOnly — a rule counting only successful responses:
// five 503s of one client pass under a limit of 2, then two successes,
// then a 429.
func OutcomeSuccessfulOnly(t *testing.T, h Harness) {
	tg := h.Start(t, Setup{App: true, Options: httplimit.Options{
		Rules: MustRules(t, `{"rules": [{"name": "r", "limit": 2, "window": "1m", "count": "successful"}]}`),
		Keys:  httplimit.KeyConfig{TrustedProxies: Loopback},
		Clock: NewClock(),
	}})
	c := NewClient(t, tg.URL, 1)
	for i := range 5 {
		Check(t, fmt.Sprintf("503 %d", i), c.Get("/", outcomeReq("192.0.2.22", 503, "")...), 503, H{XRemaining: "1"})
	}
	Check(t, "success 1", c.Get("/", outcomeReq("192.0.2.22", 200, "")...), 200, H{XRemaining: "1"})
	Check(t, "success 2", c.Get("/", outcomeReq("192.0.2.22", 201, "")...), 201, H{XRemaining: "0"})
	Check(t, "success 3", c.Get("/", outcomeReq("192.0.2.22", 200, "")...), 429, H{XRemaining: "0"})
	checkSettled(t, tg, httplimit.SettleStats{Refunded: 5})
}

// OutcomeCost — a final cost reported after the handler settles: limit
// 10 per minute, each request decided at cost 1. A response reporting 5
// charges 4 more, which the next decision sees (4 remaining); one
// reporting 0 is refunded; reports that are not costs ("abc", "-3") are
// counted and ignored; one reporting 4 at 1 remaining is an overdraft,
// never refused, and the next request is denied. The response fields
// describe the decision made before the handler. With hook, the
// middleware's FinalCost hook reads the application's field (which then
// reaches the client); without, the rule's cost_header names it (and the
// middleware removes it).
func OutcomeCost(t *testing.T, h Harness, hook bool) {
	rule := `{"rules": [{"name": "llm", "limit": 10, "window": "1m", "cost_header": "x-cost"}]}`
	if hook {
		rule = `{"rules": [{"name": "llm", "limit": 10, "window": "1m"}]}`
	}
	s := Setup{App: true, Options: httplimit.Options{
		Rules: MustRules(t, rule),
		Keys:  httplimit.KeyConfig{TrustedProxies: Loopback},
		Clock: NewClock(),
	}}
	if hook {
		s.FinalCostField = AppCostField
	}
	tg := h.Start(t, s)
	c := NewClient(t, tg.URL, 1)
	for i, st := range []struct {
		report string
		status int
		rem    string
	}{
		{"5", 200, "9"}, {"", 200, "4"}, {"0", 200, "3"}, {"", 200, "3"},
		{"abc", 200, "2"}, {"-3", 200, "1"}, {"4", 200, "0"}, {"", 429, "0"},
	} {
		r := c.Get("/", outcomeReq("192.0.2.23", 200, st.report)...)
		want := H{XRemaining: st.rem}
		if st.status == 200 && !hook {
			want[AppCostField] = Absent
		}
		Check(t, fmt.Sprintf("request %d reporting %q", i, st.report), r, st.status, want)
	}
	checkSettled(t, tg, httplimit.SettleStats{Charged: 7, Refunded: 1, BadReports: 2})
}

// OutcomePanics — a handler that panics is settled as a failed response
// (status 500): under a rule counting only successes it is refunded, under
// one counting only failures it counts; http.ErrAbortHandler too. The
// panicking requests are POSTs, which net/http's client does not retry
// when the server closes the connection. Only for servers that survive a panicking handler (Harness.SurvivesPanics).
func OutcomePanics(t *testing.T, h Harness) {
	if !h.SurvivesPanics {
		t.Skip("the server does not survive a panicking handler; tested without a server")
	}
	tg := h.Start(t, Setup{App: true, Options: httplimit.Options{
		Rules: MustRules(t, `{"rules": [
			{"name": "ok", "path": "/ok", "limit": 1, "window": "1m", "count": "successful"},
			{"name": "fail", "path": "/fail", "limit": 1, "window": "1m", "count": "failed"}
		]}`),
		Keys:  httplimit.KeyConfig{TrustedProxies: Loopback},
		Clock: NewClock(),
	}})
	c := NewClient(t, tg.URL, 1)
	for _, p := range []string{"1", "abort"} {
		if _, err := c.Do("POST", "/ok", append(outcomeReq("192.0.2.24", 200, ""), AppPanic, p)...); err == nil {
			t.Errorf("panic %q: a response, want the connection closed", p)
		}
	}
	Check(t, "/ok after the panics", c.Get("/ok", outcomeReq("192.0.2.24", 200, "")...), 200, H{XRemaining: "0"})
	Check(t, "/ok at the limit", c.Get("/ok", outcomeReq("192.0.2.24", 200, "")...), 429, nil)
	if r, err := c.Do("POST", "/fail", append(outcomeReq("192.0.2.24", 200, ""), AppPanic, "abort")...); err == nil {
		t.Errorf("abort: a response %+v, want the connection closed", r)
	}
	Check(t, "/fail after the abort", c.Get("/fail", outcomeReq("192.0.2.24", 500, "")...), 429, nil)
	checkSettled(t, tg, httplimit.SettleStats{Refunded: 2})
}

// OutcomePlumbing checks, through a limiter that records its Settle calls
// (SettleRecorder), what the middleware settles after its real server's
// handler: the client key, the instant of the decision, the delta, for a
// rule counting only failures (a success refunds its cost: 1, or the
// request's cost 3) and one reading a cost header (the difference to the
// cost decided); nothing for a response that counts at the cost decided,
// nor for a denied request.
func OutcomePlumbing(t *testing.T, h Harness) {
	clock := NewClock()
	rec := &SettleRecorder{}
	tg := h.Start(t, Setup{App: true, CostHeader: true, Options: httplimit.Options{
		Rules: MustRules(t, `{"rules": [
			{"name": "f", "path": "/f", "limit": 5, "window": "1m", "count": "failed"},
			{"name": "c", "path": "/c", "limit": 5, "window": "1m", "cost_header": "X-Cost"}
		]}`),
		Keys:       httplimit.KeyConfig{TrustedProxies: Loopback},
		Clock:      clock,
		NewLimiter: rec.NewLimiter,
	}})
	c := NewClient(t, tg.URL, 1)
	ip := "192.0.2.25"
	Check(t, "/f 200", c.Get("/f", outcomeReq(ip, 200, "")...), 200, nil)
	clock.At(Sec(1))
	Check(t, "/f 200 cost 3", c.Get("/f", append(outcomeReq(ip, 200, ""), "X-Cost", "3")...), 200, nil)
	Check(t, "/f 500", c.Get("/f", outcomeReq(ip, 500, "")...), 500, nil)
	clock.At(Sec(2))
	Check(t, "/c reports 4", c.Get("/c", outcomeReq(ip, 200, "4")...), 200, H{AppCostField: Absent})
	Check(t, "/c reports 1", c.Get("/c", outcomeReq(ip, 200, "1")...), 200, nil)
	Check(t, "/c cost 2 reports 0", c.Get("/c", append(outcomeReq(ip, 200, "0"), "X-Cost", "2")...), 200, nil)
	Check(t, "/c cost 9 denied", c.Get("/c", append(outcomeReq(ip, 200, "0"), "X-Cost", "9")...), 429, nil)
	key := "ip:" + ip
	want := []SettleCall{
		{"f", key, T0, -1}, {"f", key, T0.Add(time.Second), -3},
		{"c", key, T0.Add(2 * time.Second), 3}, {"c", key, T0.Add(2 * time.Second), -2},
	}
	got := rec.Calls()
	if len(got) != len(want) {
		t.Fatalf("Settle calls %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Rule != want[i].Rule || got[i].Key != want[i].Key || !got[i].At.Equal(want[i].At) || got[i].Delta != want[i].Delta {
			t.Errorf("Settle call %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	checkSettled(t, tg, httplimit.SettleStats{Refunded: 6, Charged: 3})
}

// SettleCall is one call of a SettleRecorder's limiter's Settle.
type SettleCall struct {
	Rule  string    // the rule whose limiter was called
	Key   string    // the client key, without the rule's namespace
	At    time.Time // the instant passed
	Delta int       // the units passed
}

// SettleRecorder builds limiters (Options.NewLimiter) that record their
// Settle calls and settle nothing: a test of what the middleware asks of
// a limiter, not of what the limiter does with it. Safe for concurrent
// use.
type SettleRecorder struct {
	mu    sync.Mutex
	calls []SettleCall
}

// NewLimiter is an Options.NewLimiter: shardlimit.New's limiter, with a
// Settle that records.
func (r *SettleRecorder) NewLimiter(rule string, cfg shardlimit.Config) (shardlimit.Limiter, error) {
	lim, err := shardlimit.New(cfg)
	if err != nil {
		return nil, err
	}
	return &recordingLimiter{Limiter: lim, rec: r, rule: rule}, nil
}

// Calls returns the calls recorded so far, in order.
func (r *SettleRecorder) Calls() []SettleCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]SettleCall(nil), r.calls...)
}

// recordingLimiter is a real limiter whose Settle records the call.
type recordingLimiter struct {
	shardlimit.Limiter
	rec  *SettleRecorder
	rule string
}

// Settle records the call and returns nil.
func (l *recordingLimiter) Settle(key string, at time.Time, delta int) error {
	l.rec.mu.Lock()
	defer l.rec.mu.Unlock()
	l.rec.calls = append(l.rec.calls, SettleCall{Rule: l.rule, Key: key[httplimit.KeyNamespaceLen:], At: at, Delta: delta})
	return nil
}

// AppStatusOf returns the status the outcome application answers a request
// with header h: AppStatus's, else 200.
func AppStatusOf(h func(string) string) int {
	if n, err := strconv.Atoi(h(AppStatus)); err == nil && n >= 200 && n <= 599 {
		return n
	}
	return http.StatusOK
}

// ParseReportedCost is what the harnesses' FinalCost hooks return for the
// value v of Setup.FinalCostField: keep (the cost decided) if v is empty,
// -1 (a bad report) if v is not an integer.
func ParseReportedCost(v string, keep int) int {
	if v == "" {
		return keep
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return -1
	}
	return n
}
