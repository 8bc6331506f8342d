package mwengine

import (
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// settleCall is one Settle call a settleWrap recorded.
type settleCall struct {
	key   string
	at    time.Time
	delta int
}

// settleWrap is a real limiter with a Settle of the test's own, which
// records its calls and returns err: what the engine asks of a limiter,
// not what the limiter does with it.
type settleWrap struct {
	shardlimit.Limiter
	mu    sync.Mutex
	calls []settleCall
	err   error
}

func (w *settleWrap) Settle(key string, at time.Time, delta int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, settleCall{key, at, delta})
	return w.err
}

// take returns and forgets the calls recorded.
func (w *settleWrap) take() []settleCall {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.calls
	w.calls = nil
	return c
}

// settleWraps builds settleWraps as Options.NewLimiter, by rule name.
type settleWraps struct {
	mu   sync.Mutex
	byID map[string]*settleWrap
	err  error // the err of the wraps built
}

func (s *settleWraps) newLimiter(rule string, cfg shardlimit.Config) (shardlimit.Limiter, error) {
	lim, err := shardlimit.New(cfg)
	if err != nil {
		return nil, err
	}
	w := &settleWrap{Limiter: lim, err: s.err}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID == nil {
		s.byID = map[string]*settleWrap{}
	}
	s.byID[rule] = w
	return w, nil
}

func (s *settleWraps) get(rule string) *settleWrap {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byID[rule]
}

// outcomeRules are the rules of the settle tests: one of each kind.
const outcomeRules = `{"rules": [
	{"name": "all", "path": "/all", "limit": 10, "window": "1m"},
	{"name": "failed", "path": "/failed", "limit": 10, "window": "1m", "count": "failed"},
	{"name": "ok", "path": "/ok", "limit": 10, "window": "1m", "count": "successful"},
	{"name": "cost", "path": "/cost", "limit": 10, "window": "1m", "cost_header": "x-cost"},
	{"name": "both", "path": "/both", "limits": [{"limit": 10, "window": "1m"}, {"limit": 20, "window": "1h"}], "count": "failed", "cost_header": "X-Cost"},
	{"name": "shut", "path": "/shut", "limit": 0, "window": "1m", "count": "failed"}
]}`

// decideSettle decides a request from 192.0.2.1 on path at t0+at with
// cost, then, if the engine says it settles, settles it with status and
// the reported cost; it reports whether it settled.
func decideSettle(e *Engine, path string, at time.Duration, cost, status, report int) (Outcome, bool) {
	sc := e.GetScratch()
	defer e.PutScratch(sc)
	var o Outcome
	q := Request[string]{Method: "GET", Path: path, Client: netip.MustParseAddr("192.0.2.1"), Now: t0.Add(at), Cost: cost}
	Decide(e, sc, &q, &o)
	if !e.Settles(&o) {
		return o, false
	}
	e.Settle(sc, &o, status, report)
	return o, true
}

// TestSettleDeltas checks, per rule kind, whether a request is settled
// and the delta passed to Settle: the key with the rule's namespace, the
// instant of the decision, final cost minus the cost decided, no call
// when they are equal, none for denied requests or rules that need none.
func TestSettleDeltas(t *testing.T) {
	ws := &settleWraps{}
	e := newTestEngine(t, httplimit.Options{Rules: mustParse(t, outcomeRules), NewLimiter: ws.newLimiter, Clock: shardlimit.NewManualClock(t0)})
	for _, tc := range []struct {
		name, path           string
		cost, status, report int
		settles              bool
		delta                int // 0: no call
	}{
		{"count all: not settled", "/all", 1, 500, NoCost, false, 0},
		{"failed: success refunded", "/failed", 1, 200, NoCost, true, -1},
		{"failed: status 0 is 200", "/failed", 1, 0, NoCost, true, -1},
		{"failed: 399 refunded", "/failed", 3, 399, NoCost, true, -3},
		{"failed: 400 counts", "/failed", 1, 400, NoCost, true, 0},
		{"failed: 503 counts", "/failed", 2, 503, NoCost, true, 0},
		{"ok: success counts", "/ok", 1, 204, NoCost, true, 0},
		{"ok: failure refunded", "/ok", 2, 404, NoCost, true, -2},
		{"cost: reported 5", "/cost", 1, 200, 5, true, 4},
		{"cost: reported 0", "/cost", 2, 200, 0, true, -2},
		{"cost: none reported", "/cost", 1, 200, NoCost, true, 0},
		{"cost: bad report", "/cost", 1, 200, BadCost, true, 0},
		{"cost: reported as decided", "/cost", 3, 500, 3, true, 0},
		{"cost 0 decided, 4 reported", "/cost", 0, 200, 4, true, 4},
		{"both: failure reporting 2", "/both", 1, 500, 2, true, 1},
		{"both: success reporting 7", "/both", 1, 200, 7, true, -1},
		{"denied: not settled", "/shut", 1, 200, NoCost, false, 0},
		{"no rule: not settled", "/none", 1, 200, NoCost, false, 0},
	} {
		o, settled := decideSettle(e, tc.path, time.Second, tc.cost, tc.status, tc.report)
		if settled != tc.settles {
			t.Errorf("%s: settled %t (%v), want %t", tc.name, settled, o.Action, tc.settles)
		}
		if o.Rule == "" {
			continue
		}
		calls := ws.get(o.Rule).take()
		switch {
		case tc.delta == 0 && len(calls) != 0:
			t.Errorf("%s: Settle calls %+v, want none", tc.name, calls)
		case tc.delta != 0 && len(calls) != 1:
			t.Errorf("%s: Settle calls %+v, want one of %d", tc.name, calls, tc.delta)
		case tc.delta != 0:
			c := calls[0]
			key := httplimit.KeyNamespace(o.Rule) + "ip:192.0.2.1"
			if c.key != key || !c.at.Equal(t0.Add(time.Second)) || c.delta != tc.delta {
				t.Errorf("%s: Settle(%q, %v, %d), want (%q, %v, %d)", tc.name, c.key, c.at, c.delta, key, t0.Add(time.Second), tc.delta)
			}
		}
	}
}

// TestSettleRestoresNamespace checks that Settle passes the key under the
// rule's own namespace even if the Scratch's key was rewritten under
// another rule's namespace after the decision (as a second rule deciding
// the same request does).
func TestSettleRestoresNamespace(t *testing.T) {
	ws := &settleWraps{}
	e := newTestEngine(t, httplimit.Options{Rules: mustParse(t, outcomeRules), NewLimiter: ws.newLimiter})
	sc := e.GetScratch()
	defer e.PutScratch(sc)
	var o Outcome
	Decide(e, sc, &Request[string]{Method: "GET", Path: "/failed", Client: netip.MustParseAddr("192.0.2.1"), Now: t0, Cost: 1}, &o)
	copy(sc.lkey, httplimit.KeyNamespace("other"))
	e.Settle(sc, &o, 200, NoCost)
	want := httplimit.KeyNamespace("failed") + "ip:192.0.2.1"
	if c := ws.get("failed").take(); len(c) != 1 || c[0].key != want {
		t.Errorf("Settle calls %+v, want one for key %q", c, want)
	}
}

// TestFailedResponseHook checks that Options.FailedResponse decides what
// failed, given the decision and the status.
func TestFailedResponseHook(t *testing.T) {
	ws := &settleWraps{}
	var seen []int
	e := newTestEngine(t, httplimit.Options{Rules: mustParse(t, outcomeRules), NewLimiter: ws.newLimiter,
		FailedResponse: func(d httplimit.Decision, status int) bool {
			if d.Rule != "failed" || d.Cost != 2 {
				t.Errorf("FailedResponse given %+v", d)
			}
			seen = append(seen, status)
			return status >= 500 || status == 200
		}})
	for _, tc := range []struct{ status, delta int }{{200, 0}, {404, -2}, {500, 0}, {0, 0}} {
		decideSettle(e, "/failed", 0, 2, tc.status, NoCost)
		calls := ws.get("failed").take()
		if (tc.delta == 0) != (len(calls) == 0) || len(calls) == 1 && calls[0].delta != tc.delta {
			t.Errorf("status %d: calls %+v, want delta %d", tc.status, calls, tc.delta)
		}
	}
	if want := []int{200, 404, 500, 200}; len(seen) != len(want) || seen[3] != 200 {
		t.Errorf("FailedResponse saw statuses %v, want %v", seen, want)
	}
}

// TestSettleStats checks the settlement counters of RuleStats and Stats:
// units refunded and charged as asked, bad reports, and failed Settle
// calls (counted as errors, not as units).
func TestSettleStats(t *testing.T) {
	ws := &settleWraps{}
	e := newTestEngine(t, httplimit.Options{Rules: mustParse(t, outcomeRules), NewLimiter: ws.newLimiter})
	decideSettle(e, "/failed", 0, 3, 200, NoCost) // refund 3
	decideSettle(e, "/cost", 0, 1, 200, 6)        // charge 5
	decideSettle(e, "/cost", 0, 2, 200, 1)        // refund 1
	decideSettle(e, "/cost", 0, 1, 200, BadCost)  // bad
	ws.get("ok").err = errors.New("store down")
	decideSettle(e, "/ok", 0, 4, 500, NoCost) // refund 4, refused
	want := map[string]httplimit.SettleStats{
		"failed": {Refunded: 3},
		"cost":   {Refunded: 1, Charged: 5, BadReports: 1},
		"ok":     {Errors: 1},
	}
	for _, rs := range e.RuleStats() {
		if rs.Settled != want[rs.Name] {
			t.Errorf("rule %q: Settled %+v, want %+v", rs.Name, rs.Settled, want[rs.Name])
		}
	}
	if got := e.Stats().Settled; got != (httplimit.SettleStats{Refunded: 4, Charged: 5, BadReports: 1, Errors: 1}) {
		t.Errorf("Stats.Settled = %+v", got)
	}
}

// TestSettleKeptAcrossReload checks that a rule keeping its limiter
// across a reload keeps its settlement counters, and that a rule gaining
// "count" on a kept limiter settles from then on.
func TestSettleKeptAcrossReload(t *testing.T) {
	ws := &settleWraps{}
	e := newTestEngine(t, httplimit.Options{Rules: mustParse(t, outcomeRules), NewLimiter: ws.newLimiter})
	decideSettle(e, "/failed", 0, 1, 200, NoCost)
	if _, settled := decideSettle(e, "/all", 0, 1, 200, NoCost); settled {
		t.Fatal("rule all settled")
	}
	err := e.Reload(mustParse(t, `{"rules": [
		{"name": "failed", "path": "/failed", "limit": 10, "window": "1m"},
		{"name": "all", "path": "/all", "limit": 10, "window": "1m", "count": "failed"}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, settled := decideSettle(e, "/all", 0, 1, 200, NoCost); !settled {
		t.Error("rule all, counting failures after the reload, not settled")
	}
	for _, rs := range e.RuleStats() {
		if rs.Settled.Refunded != 1 {
			t.Errorf("rule %q after the reload: Settled %+v, want 1 refunded", rs.Name, rs.Settled)
		}
	}
}

// TestCostHookSettlesEveryRule checks that with a final cost hook every
// admitted request of every rule is settled.
func TestCostHookSettlesEveryRule(t *testing.T) {
	ws := &settleWraps{}
	e := newTestEngine(t, httplimit.Options{Rules: mustParse(t, outcomeRules), NewLimiter: ws.newLimiter})
	e.EnableCostHook()
	if _, settled := decideSettle(e, "/all", 0, 1, 200, 3); !settled {
		t.Fatal("rule all not settled with a cost hook")
	}
	if c := ws.get("all").take(); len(c) != 1 || c[0].delta != 2 {
		t.Errorf("rule all: calls %+v, want one of 2", c)
	}
}

// TestParseCost checks the cost header's grammar: decimal digits in
// [0, shardlimit.MaxLimit], nothing else.
func TestParseCost(t *testing.T) {
	for v, want := range map[string]int{
		"": NoCost, "0": 0, "5": 5, "007": 7, "1073741823": shardlimit.MaxLimit,
		"1073741824": BadCost, "99999999999999999999999": BadCost, "-1": BadCost, "+1": BadCost,
		" 1": BadCost, "1.5": BadCost, "1e3": BadCost, "abc": BadCost, "0x10": BadCost,
	} {
		if got := ParseCost(v); got != want {
			t.Errorf("ParseCost(%q) = %d, want %d", v, got, want)
		}
		if got := ParseCost([]byte(v)); got != want {
			t.Errorf("ParseCost([]byte(%q)) = %d, want %d", v, got, want)
		}
	}
	for n, want := range map[int]int{0: 0, 9: 9, -1: BadCost, shardlimit.MaxLimit: shardlimit.MaxLimit, shardlimit.MaxLimit + 1: BadCost} {
		if got := CheckCost(n); got != want {
			t.Errorf("CheckCost(%d) = %d, want %d", n, got, want)
		}
	}
}

// TestSettleConcurrentWithReload settles requests from several goroutines
// while reloads switch the rule between counting failures and counting
// all: under -race, and every refund asked is either counted or refused
// (a limiter closed meanwhile), none lost.
func TestSettleConcurrentWithReload(t *testing.T) {
	ws := &settleWraps{}
	counting := mustParse(t, `{"rules": [{"name": "r", "limit": 1000000, "window": "1h", "count": "failed"}]}`)
	plain := mustParse(t, `{"rules": [{"name": "r", "limit": 1000000, "window": "1h"}]}`)
	e := newTestEngine(t, httplimit.Options{Rules: counting, NewLimiter: ws.newLimiter})
	const workers, each = 4, 200
	var wg sync.WaitGroup
	var settled [workers]int
	for w := range workers {
		wg.Go(func() {
			for range each {
				if _, ok := decideSettle(e, "/x", 0, 1, 200, NoCost); ok {
					settled[w]++
				}
			}
		})
	}
	for i := range 50 {
		rules := plain
		if i%2 == 1 {
			rules = counting
		}
		if err := e.Reload(rules); err != nil {
			t.Error(err)
		}
	}
	wg.Wait()
	total := 0
	for _, n := range settled {
		total += n
	}
	st := e.Stats().Settled
	if st.Refunded+st.Errors != uint64(total) || len(ws.get("r").take()) != total {
		t.Errorf("%d requests settled, Settled %+v", total, st)
	}
}
