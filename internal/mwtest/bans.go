package mwtest

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit/httplimit"
)

// PolicyTarget is a running server for the cases of bans and concurrency
// limits, whose application handler answers:
//
//	/slow   reports its entry on Entered, then waits for a value on
//	        Release (net/http: or for the client to go away) and answers
//	        200 "ok\n"; a wrapper outside the middleware reports on
//	        Exited once the middleware returned (its slot given back)
//	/panic  panics (net/http: with http.ErrAbortHandler; fasthttp: a
//	        recovering wrapper outside the middleware answers 500)
//	other   200 "ok\n"
type PolicyTarget struct {
	URL         string
	Bans        func() []httplimit.BanEntry
	SetBan      func(rule, key string, d time.Duration) error
	LiftBan     func(rule, key string) (bool, error)
	InFlight    func(rule, key string) int
	PolicyStats func() httplimit.PolicyStats
	// Entered receives the path of each request to /slow as its handler
	// starts, Exited as the middleware around it returns; Release lets
	// one such handler return.
	Entered, Exited chan string
	Release         chan struct{}
	// CtxCancel reports whether a /slow handler returns when its client
	// goes away (net/http's request context); fasthttp's does not.
	CtxCancel bool
}

// PolicyHarness starts one middleware's server for the policy cases.
type PolicyHarness struct {
	Start func(t *testing.T, s Setup) *PolicyTarget
}

// PolicyCases are the cases of bans and concurrency limits both
// middlewares run.
var PolicyCases = []struct {
	Name string
	Run  func(t *testing.T, h PolicyHarness)
}{
	{"BanAfterViolations", BanAfterViolations},
	{"BanRetryAfterAdmits", BanRetryAfterAdmits},
	{"ConcurrencyCap", ConcurrencyCap},
	{"ConcurrencyPanic", ConcurrencyPanic},
	{"ConcurrencyDroppedConnection", ConcurrencyDroppedConnection},
	{"ConcurrencyErrorPass", ConcurrencyErrorPass},
	{"ConcurrencySettled", ConcurrencySettled},
}

// RunPolicies runs every case of PolicyCases against h.
func RunPolicies(t *testing.T, h PolicyHarness) {
	for _, c := range PolicyCases {
		t.Run(c.Name, func(t *testing.T) { c.Run(t, h) })
	}
}

// NewPolicyTarget returns a PolicyTarget's channels, sized for the cases.
func NewPolicyTarget() *PolicyTarget {
	return &PolicyTarget{Entered: make(chan string, 16), Exited: make(chan string, 16), Release: make(chan struct{}, 16)}
}

// recv waits, at most 10s, for a value on ch.
func recv(t *testing.T, what string, ch chan string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// BanAfterViolations checks, over a real server, that a client denied
// After times within Within is banned (429, Retry-After the rest of the
// ban when the limiter's own wait is shorter), listed by Bans, lifted by LiftBan, set by
// SetBan, and banned longer on a repeat offence; others pass.
func BanAfterViolations(t *testing.T, h PolicyHarness) {
	clk := NewClock()
	tg := h.Start(t, Setup{Options: httplimit.Options{Clock: clk, Keys: httplimit.KeyConfig{TrustedProxies: Loopback},
		Rules: MustRules(t, `{"rules": [{"name": "r", "prefix": "/", "limit": 1, "window": "1m",
			"ban": {"after": 2, "within": "1m", "for": "10m", "growth": 2, "max": "1h"}}]}`)}})
	c := NewClient(t, tg.URL, 1)
	bad, good := XFF("192.0.2.66"), XFF("192.0.2.1")
	Check(t, "first", c.Get("/", bad...), 200, H{XLimit: "1", XRemaining: "0"})
	Check(t, "denial 1", c.Get("/", bad...), 429, H{RetryAfter: "60"})
	Check(t, "denial 2", c.Get("/", bad...), 429, H{RetryAfter: "60"})
	clk.At(Sec(30))
	r := c.Get("/", bad...)
	Check(t, "banned", r, 429, H{RetryAfter: "570", XLimit: "1", XRemaining: "0", XReset: "570"})
	if !strings.Contains(r.Body, "banned") {
		t.Errorf("banned body %q", r.Body)
	}
	Check(t, "another client", c.Get("/", good...), 200, H{XRemaining: "0"})
	bans := tg.Bans()
	if len(bans) != 1 || bans[0].Rule != "r" || bans[0].Key != "ip:192.0.2.66" || bans[0].Remaining != Sec(570) || bans[0].Offences != 1 {
		t.Fatalf("Bans() = %+v", bans)
	}
	if was, err := tg.LiftBan("r", "ip:192.0.2.66"); !was || err != nil {
		t.Fatalf("LiftBan: %v %v", was, err)
	}
	clk.At(Sec(60))
	Check(t, "after the lift", c.Get("/", bad...), 200, H{XRemaining: "0"})
	// The lift forgot the offence: the next ban is a first one again.
	Check(t, "denial 3", c.Get("/", bad...), 429, nil)
	Check(t, "denial 4", c.Get("/", bad...), 429, nil)
	Check(t, "banned again", c.Get("/", bad...), 429, H{RetryAfter: "600"})
	// A repeat offence: 20m.
	clk.At(Sec(60 + 600))
	Check(t, "ban over", c.Get("/", bad...), 200, nil)
	Check(t, "denial 5", c.Get("/", bad...), 429, nil)
	Check(t, "denial 6", c.Get("/", bad...), 429, nil)
	Check(t, "banned longer", c.Get("/", bad...), 429, H{RetryAfter: "1200"})
	// SetBan bans a client that never violated.
	if err := tg.SetBan("r", "ip:192.0.2.1", 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	Check(t, "set ban", c.Get("/", good...), 429, H{RetryAfter: "300"})
	if st := tg.PolicyStats(); st.BansStarted != 3 || st.Banned != 4 {
		t.Errorf("PolicyStats %+v, want 3 bans started, 4 requests banned", st)
	}
}

// BanRetryAfterAdmits checks, over a real server, that a client banned
// for less than its limit's own wait gets a Retry-After that, waited,
// admits its retry: the later of the ban's end and the limiter's wait.
func BanRetryAfterAdmits(t *testing.T, h PolicyHarness) {
	clk := NewClock()
	tg := h.Start(t, Setup{Options: httplimit.Options{Clock: clk, Keys: httplimit.KeyConfig{TrustedProxies: Loopback},
		Rules: MustRules(t, `{"rules": [{"name": "r", "prefix": "/", "limit": 2, "window": "1m",
			"ban": {"after": 1, "within": "1m", "for": "5s"}}]}`)}})
	c := NewClient(t, tg.URL, 1)
	bad := XFF("192.0.2.66")
	Check(t, "first", c.Get("/", bad...), 200, nil)
	Check(t, "second", c.Get("/", bad...), 200, nil)
	Check(t, "denied, banned for 5s", c.Get("/", bad...), 429, H{RetryAfter: "60"})
	clk.At(Sec(1))
	// The ban ends at 5s, the window at 60s: the limiter's wait decides.
	r := c.Get("/", bad...)
	Check(t, "banned", r, 429, H{RetryAfter: "59", XReset: "4"})
	if !strings.Contains(r.Body, "retry in 59 s") {
		t.Errorf("banned body %q", r.Body)
	}
	clk.At(Sec(1 + 59))
	Check(t, "retried after Retry-After", c.Get("/", bad...), 200, nil)
	if st := tg.PolicyStats(); st.BansStarted != 1 || st.Banned != 1 {
		t.Errorf("PolicyStats %+v, want 1 ban started, 1 request banned", st)
	}
}

// concurrencyRules caps /slow and /panic at limit in flight per client,
// answered with status.
func concurrencyRules(t *testing.T, limit, status int) *httplimit.Rules {
	return MustRules(t, fmt.Sprintf(`{"rules": [{"name": "r", "prefix": "/", "limit": 1000, "window": "1m",
		"concurrency": {"limit": %d, "status": %d, "retry_after": "3s"}}]}`, limit, status))
}

// ConcurrencyCap checks, with handlers blocked on a channel, that a
// client never has more than the limit in flight, that the request over
// it gets the rule's status and Retry-After, and that a slot given back
// admits the next.
func ConcurrencyCap(t *testing.T, h PolicyHarness) {
	tg := h.Start(t, Setup{Options: httplimit.Options{Rules: concurrencyRules(t, 2, 503)}})
	c := NewClient(t, tg.URL, 4)
	var wg sync.WaitGroup
	statuses := make(chan int, 3)
	slow := func() {
		defer wg.Done()
		r, err := c.Do("GET", "/slow")
		if err != nil {
			t.Error(err)
			return
		}
		statuses <- r.Status
	}
	wg.Add(2)
	go slow()
	go slow()
	recv(t, "the first handler", tg.Entered)
	recv(t, "the second handler", tg.Entered)
	if n := tg.InFlight("r", "ip:127.0.0.1"); n != 2 {
		t.Fatalf("%d in flight, want 2", n)
	}
	r := c.Get("/other")
	if r.Status != 503 || r.Header.Get(RetryAfter) != "3" || !strings.Contains(r.Body, "at most 2 requests in flight") {
		t.Fatalf("over the cap: %d, Retry-After %q, body %q", r.Status, r.Header.Get(RetryAfter), r.Body)
	}
	tg.Release <- struct{}{}
	recv(t, "a handler's exit", tg.Exited)
	if st := <-statuses; st != 200 {
		t.Fatalf("a released request: %d", st)
	}
	wg.Add(1)
	go slow()
	recv(t, "a third handler", tg.Entered)
	tg.Release <- struct{}{}
	tg.Release <- struct{}{}
	wg.Wait()
	if n := tg.InFlight("r", "ip:127.0.0.1"); n != 0 {
		t.Fatalf("%d in flight after every handler returned", n)
	}
	if st := tg.PolicyStats(); st.InFlightRefused != 1 {
		t.Errorf("PolicyStats %+v, want 1 refused", st)
	}
}

// ConcurrencyPanic checks that a handler that panics gives its slot back.
func ConcurrencyPanic(t *testing.T, h PolicyHarness) {
	tg := h.Start(t, Setup{Options: httplimit.Options{Rules: concurrencyRules(t, 1, 429)}})
	for i := range 3 {
		c := NewClient(t, tg.URL, 1)
		r, err := c.Do("GET", "/panic")
		if err == nil && r.Status != 500 {
			t.Fatalf("panic %d: %d %q", i, r.Status, r.Body)
		}
		if n := tg.InFlight("r", "ip:127.0.0.1"); n != 0 {
			t.Fatalf("%d in flight after panic %d", n, i)
		}
	}
	if st := tg.PolicyStats(); st.InFlightRefused != 0 {
		t.Errorf("PolicyStats %+v: a panic kept its slot", st)
	}
}

// ConcurrencyDroppedConnection checks that a client that closes its
// connection mid-request does not keep its slot: once the handler
// returns (net/http: because the request's context ends; fasthttp: when
// released, as it is not told) the slot is free.
func ConcurrencyDroppedConnection(t *testing.T, h PolicyHarness) {
	tg := h.Start(t, Setup{Options: httplimit.Options{Rules: concurrencyRules(t, 1, 429)}})
	conn, err := net.Dial("tcp", strings.TrimPrefix(tg.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(conn, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	recv(t, "the handler", tg.Entered)
	if n := tg.InFlight("r", "ip:127.0.0.1"); n != 1 {
		t.Fatalf("%d in flight, want 1", n)
	}
	conn.Close()
	if !tg.CtxCancel {
		tg.Release <- struct{}{}
	}
	recv(t, "the handler's exit", tg.Exited)
	if n := tg.InFlight("r", "ip:127.0.0.1"); n != 0 {
		t.Fatalf("%d in flight after the client went away", n)
	}
	Check(t, "a new connection", NewClient(t, tg.URL, 1).Get("/other"), 200, nil)
}
