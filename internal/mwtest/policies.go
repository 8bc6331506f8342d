package mwtest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwengine"
)

// noFields are the expectations of an answer without rate-limit fields.
var noFields = H{XLimit: Absent, XRemaining: Absent, XReset: Absent, RetryAfter: Absent}

// policyRules limit /foo to 2 a minute per client; the rule set exempts
// 192.0.2.0/24 and the identity "health", and denies the identity "evil"
// everywhere; rule foo denies 198.51.100.7 and exempts 2001:db8::/32.
const policyRules = `{"rules": [
	{"name": "foo", "path": "/foo", "limit": 2, "window": "1m",
	 "deny": {"networks": ["198.51.100.7"]}, "exempt": {"networks": ["2001:db8::/32"]}}
], "exempt": {"clients": ["health"], "networks": ["192.0.2.0/24"]},
   "deny": {"clients": ["evil"]}}`

// policySetup runs policyRules with identities from X-Client-ID and client
// addresses from X-Forwarded-For.
func policySetup(t *testing.T, dryRun bool) Setup {
	return Setup{Options: httplimit.Options{
		Rules:  MustRules(t, policyRules),
		Keys:   httplimit.KeyConfig{Header: "X-Client-ID", TrustedProxies: Loopback},
		DryRun: dryRun,
		Clock:  NewClock(),
	}}
}

// ExemptNeverLimited checks that exempt clients (by network of the rule
// set, by identity, by a rule's network) pass 5 times the limit, without
// rate-limit fields and uncounted, while another client is limited at 2.
func ExemptNeverLimited(t *testing.T, h Harness) {
	tg := h.Start(t, policySetup(t, false))
	c := NewClient(t, tg.URL, 1)
	const sent = 10 // 5 times the limit
	for i := range sent {
		for _, hdr := range [][]string{XFF("192.0.2.9"), {"X-Client-ID", "health"}, XFF("2001:db8::7")} {
			Check(t, fmt.Sprintf("exempt %v #%d", hdr, i+1), c.Get("/foo", hdr...), 200, noFields)
		}
	}
	expectStep(t, "other #1", c.Get("/foo", XFF("203.0.113.1")...), A(1))
	expectStep(t, "other #2", c.Get("/foo", XFF("203.0.113.1")...), A(0))
	Check(t, "other #3", c.Get("/foo", XFF("203.0.113.1")...), 429, H{XLimit: "2"})
	st := tg.Stats()
	if st.Exempt != 3*sent || st.Allowed != 2 || st.Denied != 1 || st.Keys != 1 {
		t.Errorf("Stats %+v, want %d exempt, 2 allowed, 1 denied, 1 key: exempt clients are not counted", st, 3*sent)
	}
	if rs := tg.RuleStats(); len(rs) != 1 || rs[0].Exempt != sent {
		t.Errorf("RuleStats %+v, want rule foo with %d exempt by its own list", rs, sent)
	}
}

// DenyListed403 checks that denied clients get 403 with a body that says
// so and no rate-limit field, the rule set's list on every route and a
// rule's only on its own, uncounted; and that under DryRun they pass.
func DenyListed403(t *testing.T, h Harness) {
	tg := h.Start(t, policySetup(t, false))
	c := NewClient(t, tg.URL, 1)
	for i := range 3 {
		for _, q := range []struct {
			path string
			hdr  []string
		}{{"/foo", []string{"X-Client-ID", "evil"}}, {"/elsewhere", []string{"X-Client-ID", "evil"}}, {"/foo", XFF("198.51.100.7")}} {
			r := c.Get(q.path, q.hdr...)
			Check(t, fmt.Sprintf("%s %v #%d", q.path, q.hdr, i+1), r, 403, noFields)
			if r.Body != mwengine.BodyDenyListed {
				t.Errorf("403 body %q, want %q", r.Body, mwengine.BodyDenyListed)
			}
		}
	}
	Check(t, "rule's deny list, other route", c.Get("/elsewhere", XFF("198.51.100.7")...), 200, noFields)
	if st := tg.Stats(); st.DenyListed != 9 || st.Allowed+st.Denied != 0 || st.Keys != 0 {
		t.Errorf("Stats %+v, want 9 deny-listed, nothing counted", st)
	}
	if rs := tg.RuleStats(); rs[0].DenyListed != 3 {
		t.Errorf("rule foo: %d deny-listed, want 3 by its own list", rs[0].DenyListed)
	}

	dry := h.Start(t, policySetup(t, true))
	c = NewClient(t, dry.URL, 1)
	Check(t, "dry run", c.Get("/foo", "X-Client-ID", "evil"), 200, noFields)
	if st := dry.Stats(); st.DenyListed != 1 || st.WouldDeny != 1 {
		t.Errorf("dry run Stats %+v, want 1 deny-listed, 1 would-deny", st)
	}
}

// ShadowCountsWouldDeny checks that a shadow rule beside the enforced one
// on /foo, and one alone on /bar, count their would-denials while every
// request they would deny passes with the enforced rule's fields (or none).
func ShadowCountsWouldDeny(t *testing.T, h Harness) {
	tg := h.Start(t, Setup{Options: httplimit.Options{
		Rules: MustRules(t, `{"rules": [
			{"name": "foo", "path": "/foo", "limit": 5, "window": "1m"},
			{"name": "foo-lower", "path": "/foo", "limit": 2, "window": "1m", "shadow": true},
			{"name": "bar-try", "prefix": "/bar", "limit": 1, "window": "1m", "shadow": true}
		]}`),
		Clock: NewClock(),
	}})
	c := NewClient(t, tg.URL, 1)
	for i := range 5 {
		expectStep(t, fmt.Sprintf("/foo #%d", i+1), c.Get("/foo"), A(4-i))
		Check(t, fmt.Sprintf("/bar #%d", i+1), c.Get("/bar/x"), 200, noFields)
	}
	Check(t, "/foo #6", c.Get("/foo"), 429, H{XLimit: "5"})
	st := tg.Stats()
	if st.Allowed != 5 || st.Denied != 1 || st.ShadowAllowed != 3 || st.ShadowWouldDeny != 8 {
		t.Errorf("Stats %+v, want enforced 5 allowed, 1 denied; shadow 3 allowed (2 foo-lower, 1 bar-try), 8 would-deny (4 + 4)", st)
	}
	want := map[string][2]uint64{"foo": {5, 1}, "foo-lower": {2, 4}, "bar-try": {1, 4}}
	for _, r := range tg.RuleStats() {
		w := want[r.Name]
		if r.Stats.Allowed != w[0] || r.Stats.Denied != w[1] || r.Shadow != (r.Name != "foo") {
			t.Errorf("rule %s: shadow %v, %d allowed, %d denied; want %d, %d", r.Name, r.Shadow, r.Stats.Allowed, r.Stats.Denied, w[0], w[1])
		}
	}
}

// ReloadSwapsLists checks that lists change with the rules, atomically: a
// client exempt under one set and denied under the other, while clients
// send requests through repeated reloads, only ever gets 200 without
// fields (exempt) or 403 (denied), never a limited answer; and the new
// lists hold from the first request after Reload returns.
func ReloadSwapsLists(t *testing.T, h Harness) {
	sets := [2]*httplimit.Rules{
		MustRules(t, `{"rules": [{"name": "foo", "path": "/foo", "limit": 1, "window": "1h"}],
			"exempt": {"networks": ["192.0.2.0/24"]}}`),
		MustRules(t, `{"rules": [{"name": "foo", "path": "/foo", "limit": 1, "window": "1h",
			"deny": {"networks": ["192.0.2.0/24"]}}]}`),
	}
	tg := h.Start(t, Setup{Options: httplimit.Options{Rules: sets[0], Keys: httplimit.KeyConfig{TrustedProxies: Loopback}, Clock: NewClock()}})
	c := NewClient(t, tg.URL, 4)
	const senders, each = 4, 50
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				r, err := c.Do("GET", "/foo", XFF(fmt.Sprintf("192.0.2.%d", 1+g))...)
				switch {
				case err != nil:
					errs <- err
					return
				case r.Status == 200 && r.Header.Get(XLimit) == "", r.Status == 403:
				default:
					errs <- fmt.Errorf("sender %d #%d: %d %v, want 200 without fields or 403", g, i, r.Status, r.Header)
					return
				}
			}
		}()
	}
	for i := range 40 {
		if err := tg.Reload(sets[(i+1)%2]); err != nil {
			t.Fatal(err)
		}
		want := []int{403, 200}[i%2]
		Check(t, fmt.Sprintf("after reload %d", i+1), c.Get("/foo", XFF("192.0.2.200")...), want, noFields)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := tg.Stats(); st.Allowed+st.Denied != 0 {
		t.Errorf("Stats %+v: the listed client was counted", st)
	}
}

// TierHook checks that the tier hook's choice beats the default rules, and
// that a name the rules lack is counted and ignored.
func TierHook(t *testing.T, h Harness) {
	tg := h.Start(t, Setup{TierHeader: "X-Verified-Tier", Options: httplimit.Options{
		Rules: MustRules(t, `{"rules": [{"name": "foo", "path": "/foo", "limit": 1, "window": "1m"}],
			"tiers": [{"name": "gold", "rules": [{"name": "gold-foo", "path": "/foo", "limit": 3, "window": "1m"}]}]}`),
		Keys:  httplimit.KeyConfig{TrustedProxies: Loopback},
		Clock: NewClock(),
	}})
	c := NewClient(t, tg.URL, 1)
	gold := append(XFF("192.0.2.1"), "X-Verified-Tier", "gold")
	for i := range 3 {
		expectStep(t, fmt.Sprintf("gold #%d", i+1), c.Get("/foo", gold...), A(2-i))
	}
	Check(t, "gold #4", c.Get("/foo", gold...), 429, H{XLimit: "3"})
	other := append(XFF("192.0.2.2"), "X-Verified-Tier", "platinum")
	expectStep(t, "unknown tier #1", c.Get("/foo", other...), A(0))
	Check(t, "unknown tier #2", c.Get("/foo", other...), 429, H{XLimit: "1"})
	if st := tg.Stats(); st.UnknownTier != 2 {
		t.Errorf("Stats.UnknownTier = %d, want 2", st.UnknownTier)
	}
}

// ErrorHook checks the error hook's three answers to a full table (a
// status, a pass, a value that is no error status) and that it sees the
// limiter's error.
func ErrorHook(t *testing.T, h Harness) {
	for _, tc := range []struct {
		ret    int
		status int
		body   string
	}{
		{429, 429, "429 Too Many Requests: rate limiter unavailable.\n"},
		{httplimit.ErrorPass, 200, "ok\n"},
		{503, 503, mwengine.BodyUnavailable},
		{200, 503, mwengine.BodyUnavailable}, // not an error status: 503
	} {
		t.Run(fmt.Sprint(tc.ret), func(t *testing.T) {
			var mu sync.Mutex
			var seen []error
			tg := h.Start(t, Setup{
				ErrorStatus: func(err error) int {
					mu.Lock()
					seen = append(seen, err)
					mu.Unlock()
					return tc.ret
				},
				Options: httplimit.Options{
					Rules:   OneRule(t, "fixed_window", 2, "1m", 0, ""),
					Keys:    httplimit.KeyConfig{TrustedProxies: Loopback},
					Limiter: shardlimit.Config{Shards: 1, MaxKeys: 1, WhenFull: shardlimit.RejectNewKeys},
					Clock:   NewClock(),
				},
			})
			c := NewClient(t, tg.URL, 1)
			expectStep(t, "first client", c.Get("/", XFF("192.0.2.1")...), A(1))
			r := c.Get("/", XFF("192.0.2.2")...)
			Check(t, "table full", r, tc.status, noFields)
			if r.Body != tc.body {
				t.Errorf("body %q, want %q", r.Body, tc.body)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != 1 || !errors.Is(seen[0], shardlimit.ErrTooManyKeys) {
				t.Errorf("hook saw %v, want one ErrTooManyKeys", seen)
			}
		})
	}
}
