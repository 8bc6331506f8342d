package mwtest

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwengine"
)

// deniedLog records OnDenied decisions.
type deniedLog struct {
	mu sync.Mutex
	ds []httplimit.Decision
}

func (l *deniedLog) add(d httplimit.Decision) {
	l.mu.Lock()
	l.ds = append(l.ds, d)
	l.mu.Unlock()
}

func (l *deniedLog) last(t *testing.T) httplimit.Decision {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ds) == 0 {
		t.Fatal("OnDenied was not called")
	}
	return l.ds[len(l.ds)-1]
}

func (l *deniedLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ds)
}

// SeedRules runs the demo's seed rules (the JSON file at path): client-1
// may call /foo 10 times a minute (fixed window) and /bar 5 times (sliding
// log), client-2 20 and 10, anyone else 5 and 2 per address: an unlisted
// identity (client-3) is keyed by its address, so requests without one
// from that address share its budget. Routes without a rule are not
// limited. Every Retry-After equals the core's exact retry-after rounded
// up.
func SeedRules(t *testing.T, h Harness, path string) {
	rules, err := httplimit.LoadRules(path)
	if err != nil {
		t.Fatal(err)
	}
	clock := NewClock()
	var denied deniedLog
	tg := h.Start(t, Setup{Options: httplimit.Options{
		Rules:    rules,
		Keys:     httplimit.KeyConfig{Header: "X-Client-ID"},
		Headers:  httplimit.HeaderConfig{IETF: true, Verbose: true},
		Clock:    clock,
		OnDenied: denied.add,
	}})
	c := NewClient(t, tg.URL, 2)
	clock.At(Sec(15.3))
	for _, tc := range []seedCase{
		{"client-1", "/foo", 10, "fixed_window", "45"},
		{"client-1", "/bar", 5, "sliding_log", "60"},
		{"client-2", "/foo", 20, "fixed_window", "45"},
		{"client-2", "/bar", 10, "sliding_log", "60"},
		{"client-3", "/foo", 5, "fixed_window", "45"},
		{"client-3", "/bar", 2, "sliding_log", "60"},
	} {
		seedClient(t, c, &denied, tc)
	}
	for _, id := range []string{"", "client-4"} {
		var hdr []string
		if id != "" {
			hdr = []string{"X-Client-ID", id}
		}
		name := cmp.Or(id, "(no id)") + " from client-3's address"
		Check(t, name+" /foo", c.Get("/foo", hdr...), 429, H{XLimit: "5", XRemaining: "0", RetryAfter: "45"})
		Check(t, name+" /bar", c.Get("/bar", hdr...), 429, H{XLimit: "2", XRemaining: "0", RetryAfter: "60"})
	}
	r := c.Get("/healthz", "X-Client-ID", "client-1")
	Check(t, "/healthz (no rule)", r, 200, H{XLimit: Absent, XRemaining: Absent, XReset: Absent, RLPolicy: Absent, RL: Absent})
}

// seedCase is a client's route under the seed rules.
type seedCase struct {
	client    string // X-Client-ID; "" sends none (keyed by address)
	route     string
	limit     int
	algorithm string
	ra        string // Retry-After of the first denial
}

// seedClient spends tc's client's budget on its route and checks the
// answers: each admitted, then one denied with the core's retry-after
// rounded up.
func seedClient(t *testing.T, c *Client, denied *deniedLog, tc seedCase) {
	t.Helper()
	var hdr []string
	if tc.client != "" {
		hdr = []string{"X-Client-ID", tc.client}
	}
	name := fmt.Sprintf("%s %s", cmp.Or(tc.client, "(no id)"), tc.route)
	for i := range tc.limit {
		Check(t, fmt.Sprintf("%s #%d", name, i+1), c.Get(tc.route, hdr...), 200, H{
			XLimit: strconv.Itoa(tc.limit), XRemaining: strconv.Itoa(tc.limit - 1 - i),
			XStrategy: tc.algorithm, XWindowMs: "60000", RetryAfter: Absent,
		})
	}
	r := c.Get(tc.route, hdr...)
	Check(t, name+" over the limit", r, 429, H{XLimit: strconv.Itoa(tc.limit), XRemaining: "0", RetryAfter: tc.ra})
	d := denied.last(t)
	if want, _ := mwengine.RetryAfterSeconds(d.Result.RetryAfter); r.Header.Get(RetryAfter) != strconv.FormatInt(want, 10) {
		t.Errorf("%s: Retry-After %q, core's retry-after %v", name, r.Header.Get(RetryAfter), d.Result.RetryAfter)
	}
	if !strings.Contains(r.Body, "Too Many Requests") {
		t.Errorf("%s: 429 body %q", name, r.Body)
	}
}

// SpoofedForwardedFor checks that X-Forwarded-For and X-Real-IP from an
// untrusted peer (no trusted proxies configured) are ignored: every request
// is keyed by the loopback peer.
func SpoofedForwardedFor(t *testing.T, h Harness) {
	tg := h.Start(t, Setup{Options: httplimit.Options{Rules: OneRule(t, "fixed_window", 3, "1m", 0, ""), Clock: NewClock()}})
	c := NewClient(t, tg.URL, 1)
	expectStep(t, "XFF 192.0.2.1", c.Get("/", "X-Forwarded-For", "192.0.2.1"), A(2))
	expectStep(t, "XFF 192.0.2.2, 192.0.2.3", c.Get("/", "X-Forwarded-For", "192.0.2.2, 192.0.2.3"), A(1))
	expectStep(t, "X-Real-IP 192.0.2.4", c.Get("/", "X-Real-IP", "192.0.2.4"), A(0))
	expectStep(t, "XFF 198.51.100.1", c.Get("/", "X-Forwarded-For", "198.51.100.1"), D(60))
}

// TrustedChain checks the right-most untrusted rule behind trusted proxies
// (loopback and 10.0.0.0/8): spoofed entries left of the real client do not
// change its key; X-Real-IP is ignored (the default ForwardedHeader is
// X-Forwarded-For), so without X-Forwarded-For the client is the proxy.
func TrustedChain(t *testing.T, h Harness) {
	tg := h.Start(t, Setup{Options: httplimit.Options{
		Rules: OneRule(t, "fixed_window", 4, "1m", 0, ""),
		Keys:  httplimit.KeyConfig{TrustedProxies: append([]string{"10.0.0.0/8"}, Loopback...)},
		Clock: NewClock(),
	}})
	c := NewClient(t, tg.URL, 1)
	expectStep(t, "via 10.0.0.2", c.Get("/", "X-Forwarded-For", "203.0.113.9, 10.0.0.2"), A(3))
	expectStep(t, "spoofed left entry", c.Get("/", "X-Forwarded-For", "192.0.2.77, 203.0.113.9, 10.0.0.2"), A(2))
	expectStep(t, "two header lines", c.Get("/", "X-Forwarded-For", "192.0.2.78", "X-Forwarded-For", "203.0.113.9:4711, 10.1.2.3"), A(1))
	expectStep(t, "X-Real-IP ignored: the proxy", c.Get("/", "X-Real-IP", "203.0.113.9"), A(3))
	expectStep(t, "and X-Real-IP ignored", c.Get("/", "X-Forwarded-For", "203.0.113.9", "X-Real-IP", "192.0.2.1"), A(0))
	expectStep(t, "denied", c.Get("/", "X-Forwarded-For", "203.0.113.9"), D(60))
	expectStep(t, "another client", c.Get("/", "X-Forwarded-For", "203.0.113.10, 10.0.0.2"), A(3))
	expectStep(t, "all hops trusted: the left-most", c.Get("/", "X-Forwarded-For", "10.9.9.9, 10.0.0.2"), A(3))
}

// ForwardedHeader checks that only KeyConfig.ForwardedHeader is read from
// trusted proxies. With X-Real-IP (a proxy that sets it and passes the
// client's own X-Forwarded-For through), a client rotating X-Forwarded-For
// values gets no fresh budget; with the default X-Forwarded-For (a proxy
// that appends to it and passes X-Real-IP through), one rotating X-Real-IP
// values gets none either.
func ForwardedHeader(t *testing.T, h Harness) {
	t.Run("X-Real-IP", func(t *testing.T) {
		tg := h.Start(t, Setup{Options: httplimit.Options{
			Rules: OneRule(t, "fixed_window", 2, "1m", 0, ""),
			Keys:  httplimit.KeyConfig{TrustedProxies: Loopback, ForwardedHeader: "X-Real-IP"},
			Clock: NewClock(),
		}})
		c := NewClient(t, tg.URL, 1)
		expectStep(t, "own XFF 1", c.Get("/", "X-Real-IP", "203.0.113.9", "X-Forwarded-For", "192.0.2.1"), A(1))
		expectStep(t, "own XFF 2", c.Get("/", "X-Real-IP", "203.0.113.9", "X-Forwarded-For", "192.0.2.2"), A(0))
		expectStep(t, "own XFF 3", c.Get("/", "X-Real-IP", "203.0.113.9", "X-Forwarded-For", "192.0.2.3, 10.0.0.1"), D(60))
		expectStep(t, "another client", c.Get("/", "X-Real-IP", "203.0.113.10", "X-Forwarded-For", "192.0.2.1"), A(1))
		expectStep(t, "no X-Real-IP: the proxy", c.Get("/", "X-Forwarded-For", "203.0.113.10"), A(1))
	})
	t.Run("X-Forwarded-For", func(t *testing.T) {
		tg := h.Start(t, Setup{Options: httplimit.Options{
			Rules: OneRule(t, "fixed_window", 2, "1m", 0, ""),
			Keys:  httplimit.KeyConfig{TrustedProxies: Loopback},
			Clock: NewClock(),
		}})
		c := NewClient(t, tg.URL, 1)
		expectStep(t, "own X-Real-IP 1", c.Get("/", "X-Forwarded-For", "203.0.113.9", "X-Real-IP", "192.0.2.1"), A(1))
		expectStep(t, "own X-Real-IP 2", c.Get("/", "X-Forwarded-For", "203.0.113.9", "X-Real-IP", "192.0.2.2"), A(0))
		expectStep(t, "own X-Real-IP 3", c.Get("/", "X-Forwarded-For", "203.0.113.9", "X-Real-IP", "192.0.2.3"), D(60))
		expectStep(t, "no X-Forwarded-For: the proxy", c.Get("/", "X-Real-IP", "203.0.113.9"), A(1))
	})
}

// ReloadKeepsCounters checks Reload over the network: rules that keep their
// name, algorithm and window keep every client's count (a changed limit
// applies at once), a rule whose algorithm changed starts fresh, a new rule
// applies, a removed one stops limiting, and an invalid rule set is refused
// and changes nothing.
func ReloadKeepsCounters(t *testing.T, h Harness) {
	clock := NewClock()
	tg := h.Start(t, Setup{Options: httplimit.Options{
		Rules: MustRules(t, `{"rules": [
			{"name": "a", "path": "/a", "algorithm": "fixed_window", "limit": 5, "window": "1m"},
			{"name": "b", "path": "/b", "algorithm": "sliding_log", "limit": 3, "window": "1m"},
			{"name": "c", "path": "/c", "algorithm": "fixed_window", "limit": 2, "window": "1m"},
			{"name": "gone", "path": "/gone", "limit": 1, "window": "1m"}
		]}`),
		Clock: clock,
	}})
	rs := reloadSteps{t: t, tg: tg, c: NewClient(t, tg.URL, 1), clock: clock}
	rs.firstRules()
	rs.changedRules()
	back := rs.rulesBack()
	rs.limitingOffAndOn(back)
}

// reloadSteps are the steps of ReloadKeepsCounters, one rule set each, on
// one server and client.
type reloadSteps struct {
	t     *testing.T
	tg    *Target
	c     *Client
	clock Clock
}

// firstRules uses the first rules, and checks that an invalid rule set is
// refused and changes nothing.
func (rs reloadSteps) firstRules() {
	rs.t.Helper()
	for i := range 3 {
		expectStep(rs.t, fmt.Sprintf("a #%d", i+1), rs.c.Get("/a"), A(4-i))
	}
	for i := range 2 {
		expectStep(rs.t, fmt.Sprintf("b #%d", i+1), rs.c.Get("/b"), A(2-i))
	}
	expectStep(rs.t, "c #1", rs.c.Get("/c"), A(1))
	expectStep(rs.t, "gone #1", rs.c.Get("/gone"), A(0))
	expectStep(rs.t, "gone #2", rs.c.Get("/gone"), D(60))

	bad := &httplimit.Rules{Rules: []httplimit.Rule{{Name: "a", Path: "/a", Limit: -1, Window: time.Minute}}}
	if err := rs.tg.Reload(bad); err == nil {
		rs.t.Fatal("Reload accepted a negative limit")
	}
	expectStep(rs.t, "a after a refused reload", rs.c.Get("/a"), A(1))
}

// changedRules reloads rules that change a limit, an algorithm, and add
// and remove a rule.
func (rs reloadSteps) changedRules() {
	rs.t.Helper()
	rs.clock.At(Sec(10))
	err := rs.tg.Reload(MustRules(rs.t, `{"rules": [
		{"name": "a", "path": "/a", "algorithm": "fixed_window", "limit": 10, "window": "1m"},
		{"name": "b", "path": "/b", "algorithm": "sliding_log", "limit": 3, "window": "1m"},
		{"name": "c", "path": "/c", "algorithm": "sliding_log", "limit": 2, "window": "1m"},
		{"name": "d", "path": "/d", "algorithm": "gcra", "limit": 1, "window": "1m"}
	]}`))
	if err != nil {
		rs.t.Fatal(err)
	}
	Check(rs.t, "a keeps 4 used of a raised limit", rs.c.Get("/a"), 200, H{XLimit: "10", XRemaining: "5"})
	expectStep(rs.t, "b keeps 2 used", rs.c.Get("/b"), A(0))
	expectStep(rs.t, "b is full", rs.c.Get("/b"), D(50))
	expectStep(rs.t, "c changed algorithm: fresh", rs.c.Get("/c"), A(1))
	expectStep(rs.t, "d is new", rs.c.Get("/d"), A(0))
	Check(rs.t, "gone is not limited", rs.c.Get("/gone"), 200, H{XLimit: Absent})
	if st := rs.tg.Stats(); st.Rules != 4 {
		rs.t.Errorf("Stats.Rules = %d, want 4", st.Rules)
	}
}

// rulesBack reloads rules that bring back a removed rule and an
// algorithm, and checks that rule sets without rules are refused; it
// returns the rules it put in force.
func (rs reloadSteps) rulesBack() *httplimit.Rules {
	rs.t.Helper()
	// Rules that come back within their window find their counters: gone,
	// and c with its first algorithm.
	rs.clock.At(Sec(20))
	back := MustRules(rs.t, `{"rules": [
		{"name": "a", "path": "/a", "algorithm": "fixed_window", "limit": 10, "window": "1m"},
		{"name": "c", "path": "/c", "algorithm": "fixed_window", "limit": 2, "window": "1m"},
		{"name": "gone", "path": "/gone", "limit": 1, "window": "1m"}
	]}`)
	if err := rs.tg.Reload(back); err != nil {
		rs.t.Fatal(err)
	}
	expectStep(rs.t, "gone came back: still used", rs.c.Get("/gone"), D(40))
	expectStep(rs.t, "c came back: 1 used", rs.c.Get("/c"), A(0))

	// A rule set without rules is refused; the rules stay in force.
	for _, js := range []string{`{}`, `{"rules": []}`} {
		if err := rs.tg.Reload(MustRulesUnchecked(rs.t, js)); !errors.Is(err, httplimit.ErrNoRules) {
			rs.t.Errorf("Reload(%s) = %v, want ErrNoRules", js, err)
		}
	}
	Check(rs.t, "a after refused empty reloads", rs.c.Get("/a"), 200, H{XLimit: "10", XRemaining: "4"})
	expectStep(rs.t, "gone after refused empty reloads", rs.c.Get("/gone"), D(40))
	return back
}

// limitingOffAndOn turns limiting off, then back on with rules back.
func (rs reloadSteps) limitingOffAndOn(back *httplimit.Rules) {
	rs.t.Helper()
	// Limiting off on purpose: nothing limited; back on: counters kept.
	if err := rs.tg.Reload(MustRules(rs.t, `{"limiting": "off"}`)); err != nil {
		rs.t.Fatal(err)
	}
	for i := range 3 {
		Check(rs.t, fmt.Sprintf("limiting off #%d", i+1), rs.c.Get("/gone"), 200, H{XLimit: Absent, RetryAfter: Absent})
	}
	if st := rs.tg.Stats(); st.Rules != 0 {
		rs.t.Errorf("limiting off: Stats.Rules = %d", st.Rules)
	}
	rs.clock.At(Sec(30))
	if err := rs.tg.Reload(back); err != nil {
		rs.t.Fatal(err)
	}
	expectStep(rs.t, "gone back on: still used", rs.c.Get("/gone"), D(30))
	Check(rs.t, "a back on: 6 used", rs.c.Get("/a"), 200, H{XLimit: "10", XRemaining: "3"})

	// A window later the counters are those of fresh clients anyway.
	rs.clock.At(Sec(60))
	expectStep(rs.t, "gone in the next window", rs.c.Get("/gone"), A(0))
}

// DryRun checks shadow mode: nothing is refused, the fields are written
// (without Retry-After), and would-be denials are counted and reported.
func DryRun(t *testing.T, h Harness) {
	var denied deniedLog
	tg := h.Start(t, Setup{Options: httplimit.Options{
		Rules: OneRule(t, "fixed_window", 2, "1m", 0, ""), DryRun: true, OnDenied: denied.add, Clock: NewClock(),
	}})
	c := NewClient(t, tg.URL, 1)
	for i, rem := range []string{"1", "0", "0", "0"} {
		Check(t, fmt.Sprintf("#%d", i+1), c.Get("/"), 200, H{XLimit: "2", XRemaining: rem, RetryAfter: Absent})
	}
	if st := tg.Stats(); st.WouldDeny != 2 || st.Allowed != 2 || st.Denied != 2 {
		t.Errorf("Stats %+v, want 2 allowed, 2 denied, 2 would-deny", st)
	}
	if denied.len() != 2 || denied.last(t).Action != httplimit.ActionDryRunDeny {
		t.Errorf("OnDenied saw %d decisions (last %v), want 2 dry-run ones", denied.len(), denied.last(t).Action)
	}
}

// Hooks checks the skip function, the custom denied handler and the
// per-method rules.
func Hooks(t *testing.T, h Harness) {
	tg := h.Start(t, Setup{SkipPath: "/skip", CustomDenied: true, Options: httplimit.Options{
		Rules: MustRules(t, `{"rules": [
			{"name": "post-x", "path": "/x", "methods": ["post"], "limit": 1, "window": "1m"},
			{"name": "x", "path": "/x", "limit": 3, "window": "1m"},
			{"name": "all", "limit": 1, "window": "1m"}
		]}`),
		Clock: NewClock(),
	}})
	c := NewClient(t, tg.URL, 1)
	for i := range 3 {
		Check(t, fmt.Sprintf("skip #%d", i+1), c.Get("/skip"), 200, H{XLimit: Absent})
	}
	expectStep(t, "catch-all #1", c.Get("/other"), A(0))
	r := c.Get("/other")
	Check(t, "custom denied", r, 429, H{"X-Denied-By": "custom", RetryAfter: "60", XRemaining: "0"})
	if r.Body != "custom denied\n" {
		t.Errorf("custom denied body %q", r.Body)
	}
	post, err := c.Do("POST", "/x")
	if err != nil {
		t.Fatal(err)
	}
	Check(t, "POST /x", post, 200, H{XLimit: "1", XRemaining: "0"})
	Check(t, "GET /x", c.Get("/x"), 200, H{XLimit: "3", XRemaining: "2"})
}

// EmptyKeys checks the empty-identity policies with an identity header and
// with a key function, and that long identities keep distinct budgets
// (every identity its own key: UnknownIdentityOwnKey).
func EmptyKeys(t *testing.T, h Harness) {
	for _, kf := range []bool{false, true} {
		setup := func(p httplimit.EmptyKeyPolicy) Setup {
			return identityFrom("X-Api-Key", kf, httplimit.Options{
				Rules: OneRule(t, "fixed_window", 2, "1m", 0, ""),
				Keys: httplimit.KeyConfig{EmptyKey: p, TrustedProxies: Loopback, MaxKeyBytes: 16,
					UnknownIdentity: httplimit.UnknownIdentityOwnKey},
				Clock: NewClock(),
			})
		}
		t.Run(fmt.Sprintf("keyfunc=%v", kf), func(t *testing.T) {
			tg := h.Start(t, setup(httplimit.EmptyKeyUseIP))
			c := NewClient(t, tg.URL, 1)
			expectStep(t, "use-ip peer 1", c.Get("/", XFF("192.0.2.1")...), A(1))
			expectStep(t, "use-ip peer 2", c.Get("/", XFF("192.0.2.2")...), A(1))
			long := strings.Repeat("k", 40)
			expectStep(t, "long key 1", c.Get("/", "X-Api-Key", long+"1"), A(1))
			expectStep(t, "long key 2", c.Get("/", "X-Api-Key", long+"2"), A(1))
			expectStep(t, "long key 1 again", c.Get("/", "X-Api-Key", long+"1"), A(0))

			tg = h.Start(t, setup(httplimit.EmptyKeyShared))
			c = NewClient(t, tg.URL, 1)
			expectStep(t, "shared peer 1", c.Get("/", XFF("192.0.2.1")...), A(1))
			expectStep(t, "shared peer 2", c.Get("/", XFF("192.0.2.2")...), A(0))
			expectStep(t, "with a key", c.Get("/", "X-Api-Key", "k1"), A(1))

			tg = h.Start(t, setup(httplimit.EmptyKeyReject))
			c = NewClient(t, tg.URL, 1)
			checkNoIdentity(t, "reject", c.Get("/"))
			expectStep(t, "with a key", c.Get("/", "X-Api-Key", "k1"), A(1))
			if st := tg.Stats(); st.NoIdentity != 1 {
				t.Errorf("Stats.NoIdentity = %d", st.NoIdentity)
			}
		})
	}
}

// identityFrom returns the Setup of o whose client identity is header's
// value: read by a key function if kf, else as KeyConfig.Header.
func identityFrom(header string, kf bool, o httplimit.Options) Setup {
	s := Setup{Options: o}
	if kf {
		s.KeyFuncHeader = header
	} else {
		s.Options.Keys.Header = header
	}
	return s
}

// checkNoIdentity checks that r refuses a request without a usable
// identity: 400, no rate-limit field, the engine's body.
func checkNoIdentity(t *testing.T, step string, r Resp) {
	t.Helper()
	Check(t, step, r, 400, H{XLimit: Absent})
	if r.Body != mwengine.BodyNoIdentity {
		t.Errorf("%s: body %q", step, r.Body)
	}
}

// UnknownIdentities checks KeyConfig.UnknownIdentity with an identity
// header and with a key function. By default, identities that no tier or
// override lists are keyed by the client address: rotating them from one
// address shares that address's budget (with requests without identity
// too), another address has its own, and listed clients (a tier's, an
// override's) keep budgets of their own. Under EmptyKeyShared unlisted
// identities share the one shared bucket, under EmptyKeyReject they are
// refused. With UnknownIdentityOwnKey every identity is its own key.
func UnknownIdentities(t *testing.T, h Harness) {
	rules := `{"rules": [{"name": "r", "limit": 2, "window": "1m"}],
		"tiers": [{"name": "gold", "clients": ["client-1"], "rules": [{"name": "gold-r", "limit": 5, "window": "1m"}]}],
		"overrides": [{"rule": "r", "id": "client-9", "limit": 3}]}`
	for _, kf := range []bool{false, true} {
		setup := func(u httplimit.UnknownIdentityPolicy, e httplimit.EmptyKeyPolicy) Setup {
			return identityFrom("X-Client-ID", kf, httplimit.Options{
				Rules: MustRules(t, rules),
				Keys:  httplimit.KeyConfig{UnknownIdentity: u, EmptyKey: e, TrustedProxies: Loopback},
				Clock: NewClock(),
			})
		}
		from := func(ip, id string) []string { return append(XFF(ip), "X-Client-ID", id) }
		t.Run(fmt.Sprintf("keyfunc=%v", kf), func(t *testing.T) {
			tg := h.Start(t, setup(httplimit.UnknownIdentityAnonymous, httplimit.EmptyKeyUseIP))
			c := NewClient(t, tg.URL, 1)
			expectStep(t, "rot1", c.Get("/", from("192.0.2.1", "rot1")...), A(1))
			expectStep(t, "rot2", c.Get("/", from("192.0.2.1", "rot2")...), A(0))
			expectStep(t, "rot3", c.Get("/", from("192.0.2.1", "rot3")...), D(60))
			expectStep(t, "no identity", c.Get("/", XFF("192.0.2.1")...), D(60))
			expectStep(t, "rot4 from another address", c.Get("/", from("192.0.2.2", "rot4")...), A(1))
			for i := range 3 {
				Check(t, fmt.Sprintf("tier client #%d", i+1), c.Get("/", from("192.0.2.1", "client-1")...), 200,
					H{XLimit: "5", XRemaining: strconv.Itoa(4 - i)})
			}
			Check(t, "override client", c.Get("/", from("192.0.2.1", "client-9")...), 200, H{XLimit: "3", XRemaining: "2"})
			Check(t, "override client from elsewhere", c.Get("/", from("192.0.2.3", "client-9")...), 200, H{XLimit: "3", XRemaining: "1"})

			tg = h.Start(t, setup(httplimit.UnknownIdentityAnonymous, httplimit.EmptyKeyShared))
			c = NewClient(t, tg.URL, 1)
			expectStep(t, "shared rot1", c.Get("/", from("192.0.2.1", "rot1")...), A(1))
			expectStep(t, "shared rot2 from another address", c.Get("/", from("192.0.2.2", "rot2")...), A(0))
			Check(t, "shared tier client", c.Get("/", from("192.0.2.1", "client-1")...), 200, H{XLimit: "5", XRemaining: "4"})

			tg = h.Start(t, setup(httplimit.UnknownIdentityAnonymous, httplimit.EmptyKeyReject))
			c = NewClient(t, tg.URL, 1)
			checkNoIdentity(t, "reject rot1", c.Get("/", from("192.0.2.1", "rot1")...))
			Check(t, "reject: tier client", c.Get("/", from("192.0.2.1", "client-1")...), 200, H{XLimit: "5", XRemaining: "4"})

			tg = h.Start(t, setup(httplimit.UnknownIdentityOwnKey, httplimit.EmptyKeyUseIP))
			c = NewClient(t, tg.URL, 1)
			expectStep(t, "own rot1", c.Get("/", from("192.0.2.1", "rot1")...), A(1))
			expectStep(t, "own rot2", c.Get("/", from("192.0.2.1", "rot2")...), A(1))
			expectStep(t, "own rot1 again", c.Get("/", from("192.0.2.2", "rot1")...), A(0))
			expectStep(t, "own: no identity", c.Get("/", XFF("192.0.2.1")...), A(1))
		})
	}
}

// Failures checks Result.Err handling: a full table under RejectNewKeys
// answers 503 (FailClosed) or passes without fields (FailOpen), and a
// closed middleware answers per its policy.
func Failures(t *testing.T, h Harness) {
	for _, p := range []httplimit.ErrorPolicy{httplimit.FailClosed, httplimit.FailOpen} {
		t.Run(fmt.Sprintf("policy=%v", p), func(t *testing.T) {
			tg := h.Start(t, Setup{Options: httplimit.Options{
				Rules:   OneRule(t, "fixed_window", 2, "1m", 0, ""),
				Keys:    httplimit.KeyConfig{TrustedProxies: Loopback},
				Limiter: shardlimit.Config{Shards: 1, MaxKeys: 1, WhenFull: shardlimit.RejectNewKeys},
				OnError: p,
				Clock:   NewClock(),
			}})
			c := NewClient(t, tg.URL, 1)
			expectStep(t, "first client", c.Get("/", XFF("192.0.2.1")...), A(1))
			r := c.Get("/", XFF("192.0.2.2")...)
			if p == httplimit.FailClosed {
				Check(t, "table full", r, 503, H{XLimit: Absent, RetryAfter: Absent})
				if r.Body != mwengine.BodyUnavailable {
					t.Errorf("503 body %q", r.Body)
				}
			} else {
				Check(t, "table full", r, 200, H{XLimit: Absent})
			}
			if st := tg.Stats(); st.Errors != 1 {
				t.Errorf("Stats.Errors = %d, want 1", st.Errors)
			}
			if err := tg.Close(); err != nil {
				t.Fatal(err)
			}
			if err := tg.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			want := 503
			if p == httplimit.FailOpen {
				want = 200
			}
			Check(t, "after Close", c.Get("/", XFF("192.0.2.1")...), want, H{XLimit: Absent})
			if err := tg.Reload(OneRule(t, "fixed_window", 2, "1m", 0, "")); err == nil {
				t.Error("Reload after Close succeeded")
			}
		})
	}
}

// HeaderSets checks that HeaderConfig only adds fields unless told to omit
// some: the IETF pair comes beside the X-RateLimit trio and Retry-After,
// omitting both the trio and Retry-After leaves no field at all, and the
// verbose pair and IETF policy names are as configured.
func HeaderSets(t *testing.T, h Harness) {
	t.Run("none", func(t *testing.T) {
		tg := h.Start(t, Setup{Options: httplimit.Options{Rules: OneRule(t, "fixed_window", 1, "1m", 0, ""), Headers: httplimit.HeaderConfig{OmitXRateLimit: true, OmitRetryAfter: true}, Clock: NewClock()}})
		c := NewClient(t, tg.URL, 1)
		none := H{XLimit: Absent, XRemaining: Absent, XReset: Absent, RL: Absent, RLPolicy: Absent, RetryAfter: Absent, XStrategy: Absent}
		Check(t, "200", c.Get("/"), 200, none)
		Check(t, "429", c.Get("/"), 429, none)
	})
	t.Run("ietf adds", func(t *testing.T) {
		tg := h.Start(t, Setup{Options: httplimit.Options{
			Rules:   OneRule(t, "fixed_window", 1, "1m", 0, ""),
			Headers: httplimit.HeaderConfig{IETF: true},
			Clock:   NewClock(),
		}})
		c := NewClient(t, tg.URL, 1)
		Check(t, "200", c.Get("/"), 200, H{XLimit: "1", XRemaining: "0", XReset: "60", RLPolicy: `"r";q=1;w=60`, RL: `"r";r=0;t=60`, RetryAfter: Absent})
		Check(t, "429", c.Get("/"), 429, H{XLimit: "1", XRemaining: "0", XReset: "60", RLPolicy: `"r";q=1;w=60`, RL: `"r";r=0;t=60`, RetryAfter: "60"})
	})
	t.Run("no retry-after", func(t *testing.T) {
		tg := h.Start(t, Setup{Options: httplimit.Options{
			Rules:   OneRule(t, "fixed_window", 1, "1m", 0, ""),
			Headers: httplimit.HeaderConfig{OmitRetryAfter: true},
			Clock:   NewClock(),
		}})
		c := NewClient(t, tg.URL, 1)
		Check(t, "200", c.Get("/"), 200, H{XLimit: "1", XRemaining: "0"})
		Check(t, "429", c.Get("/"), 429, H{XLimit: "1", XRemaining: "0", XReset: "60", RetryAfter: Absent})
	})
	t.Run("ietf+verbose", func(t *testing.T) {
		tg := h.Start(t, Setup{Options: httplimit.Options{
			Rules: MustRules(t, `{"rules": [
				{"name": "a", "path": "/a", "algorithm": "gcra", "limit": 10, "window": "90s", "policy": "per-\"a\""},
				{"name": "b", "path": "/b", "algorithm": "sliding_counter", "limit": 4, "window": "1500ms", "buckets": 3}
			]}`),
			Headers: httplimit.HeaderConfig{IETF: true, Verbose: true, PolicyName: "api", OmitXRateLimit: true},
			Clock:   NewClock(),
		}})
		c := NewClient(t, tg.URL, 1)
		Check(t, "/a", c.Get("/a"), 200, H{XLimit: Absent, RLPolicy: `"per-\"a\"";q=10;w=90`, XWindowMs: "90000", XStrategy: "gcra"})
		Check(t, "/b", c.Get("/b"), 200, H{RLPolicy: `"api";q=4;w=2`, RL: `"api";r=3;t=2`, XWindowMs: "1500", XStrategy: "sliding_counter"})
	})
}
