package mwtest

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwengine"
)

// algCase is one algorithm's rule parameters and expected steps.
type algCase struct {
	name    string // shardlimit.ParseAlgorithm name
	buckets int
	steps   []step
}

// PollerRecovers — denied requests are not counted; a steady poller recovers
// (middleware part): limit 5, W = 10 s, one GET per second from peer
// 192.0.2.10 at t = 0..19, and the long run t = 0..99 admitting exactly 50
// (fixed, log) or 46 (sliding counter).
func PollerRecovers(t *testing.T, h Harness) {
	cases := []algCase{
		{name: "fixed_window", steps: []step{A(4), A(3), A(2), A(1), A(0), D(5), D(4), D(3), D(2), D(1),
			A(4), A(3), A(2), A(1), A(0), D(5), D(4), D(3), D(2), D(1)}},
		{name: "sliding_log", steps: []step{A(4), A(3), A(2), A(1), A(0), D(5), D(4), D(3), D(2), D(1),
			A(0), A(0), A(0), A(0), A(0), D(5), D(4), D(3), D(2), D(1)}},
		{name: "sliding_counter", buckets: 10, steps: []step{A(4), A(3), A(2), A(1), A(0), D(6), D(5), D(4), D(3), D(2),
			D(1), A(0), A(0), A(0), A(0), A(0), D(6), D(5), D(4), D(3)}},
	}
	longRun := map[string]int{"fixed_window": 50, "sliding_log": 50, "sliding_counter": 46}
	for _, ac := range cases {
		t.Run(ac.name, func(t *testing.T) {
			clock := NewClock()
			tg := h.Start(t, Setup{Options: httplimit.Options{
				Rules: OneRule(t, ac.name, 5, "10s", ac.buckets, ""),
				Keys:  httplimit.KeyConfig{TrustedProxies: Loopback},
				Clock: clock,
			}})
			c := NewClient(t, tg.URL, 1)
			for i, s := range ac.steps {
				clock.At(Sec(float64(i)))
				expectStep(t, fmt.Sprintf("t=%d", i), c.Get("/poll", XFF("192.0.2.10")...), s)
			}
			admitted := 0
			for i := range 100 {
				clock.At(Sec(float64(100 + i)))
				switch r := c.Get("/poll", XFF("192.0.2.11")...); r.Status {
				case 200:
					admitted++
				case 429:
				default:
					t.Fatalf("long run t=%d: status %d", i, r.Status)
				}
			}
			if admitted != longRun[ac.name] {
				t.Errorf("long run: %d admitted, want %d", admitted, longRun[ac.name])
			}
		})
	}
}

// RemainingNeverNegative — remaining never negative, never off by one: fixed window,
// limit 3, W = 60 s, peer 192.0.2.20, IETF fields on.
func RemainingNeverNegative(t *testing.T, h Harness) {
	clock := NewClock()
	tg := h.Start(t, Setup{Options: httplimit.Options{
		Rules:   OneRule(t, "fixed_window", 3, "60s", 0, ""),
		Keys:    httplimit.KeyConfig{TrustedProxies: Loopback},
		Headers: httplimit.HeaderConfig{IETF: true},
		Clock:   clock,
	}})
	c := NewClient(t, tg.URL, 1)
	rows := []struct {
		status     int
		remaining  string
		rateLimit  string
		retryAfter string
		reset      string
	}{
		{200, "2", `"r";r=2;t=60`, Absent, "60"},
		{200, "1", `"r";r=1;t=59`, Absent, "59"},
		{200, "0", `"r";r=0;t=58`, Absent, "58"},
		{429, "0", `"r";r=0;t=57`, "57", "57"},
		{429, "0", `"r";r=0;t=56`, "56", "56"},
	}
	for i, row := range rows {
		clock.At(Sec(float64(i)))
		Check(t, fmt.Sprintf("t=%d", i), c.Get("/", XFF("192.0.2.20")...), row.status, H{
			XLimit: "3", XRemaining: row.remaining, RL: row.rateLimit, RetryAfter: row.retryAfter,
			XReset: row.reset, RLPolicy: `"r";q=3;w=60`,
		})
	}
}

// RetryAfterUnits — Retry-After in seconds, never milliseconds, never 0: fixed
// window, limit 5, W = 60 s; seconds-to-go and absolute Reset forms.
func RetryAfterUnits(t *testing.T, h Harness) {
	for _, unix := range []bool{false, true} {
		t.Run(fmt.Sprintf("ResetUnix=%v", unix), func(t *testing.T) {
			clock := NewClock()
			tg := h.Start(t, Setup{Options: httplimit.Options{
				Rules:   OneRule(t, "fixed_window", 5, "60s", 0, ""),
				Headers: httplimit.HeaderConfig{IETF: true, ResetUnix: unix},
				Clock:   clock,
			}})
			c := NewClient(t, tg.URL, 1)
			reset := func(toGo, abs int64) string {
				if unix {
					return strconv.FormatInt(abs, 10)
				}
				return strconv.FormatInt(toGo, 10)
			}
			t0 := T0.Unix()
			for i := range 5 {
				Check(t, fmt.Sprintf("step 1 #%d", i+1), c.Get("/"), 200, H{RetryAfter: Absent})
			}
			Check(t, "step 2", c.Get("/"), 429, H{RetryAfter: "60", XReset: reset(60, t0+60), RL: `"r";r=0;t=60`})
			clock.At(Sec(30.25))
			Check(t, "step 3", c.Get("/"), 429, H{RetryAfter: "30", XReset: reset(30, t0+60), RL: `"r";r=0;t=30`})
			clock.At(Sec(59.5))
			Check(t, "step 4", c.Get("/"), 429, H{RetryAfter: "1", XReset: reset(1, t0+60), RL: `"r";r=0;t=1`})
			clock.At(Sec(60))
			r := c.Get("/")
			Check(t, "step 5", r, 200, H{XRemaining: "4", RetryAfter: Absent, XReset: reset(60, t0+120)})
			if unix && len(r.Header.Get(XReset)) != 10 {
				t.Errorf("absolute X-RateLimit-Reset %q is not 10-digit epoch seconds", r.Header.Get(XReset))
			}
		})
	}
}

// ResetNotEarly — the advertised reset is never earlier than the real one
// (header part): fixed window limit 2, W = 30 s, and the sliding log.
func ResetNotEarly(t *testing.T, h Harness) {
	t.Run("fixed_window", func(t *testing.T) {
		clock := NewClock()
		tg := h.Start(t, Setup{Options: httplimit.Options{Rules: OneRule(t, "fixed_window", 2, "30s", 0, ""), Clock: clock}})
		c := NewClient(t, tg.URL, 1)
		Check(t, "t=0 #1", c.Get("/"), 200, H{XRemaining: "1"})
		Check(t, "t=0 #2", c.Get("/"), 200, H{XRemaining: "0"})
		clock.At(Sec(0.4))
		Check(t, "t=0.4", c.Get("/"), 429, H{XReset: "30", RetryAfter: "30"})
		clock.At(Sec(30))
		Check(t, "t=30", c.Get("/"), 200, H{XRemaining: "1", XReset: "30"})
	})
	t.Run("sliding_log", func(t *testing.T) {
		clock := NewClock()
		tg := h.Start(t, Setup{Options: httplimit.Options{Rules: OneRule(t, "sliding_log", 2, "30s", 0, ""), Clock: clock}})
		c := NewClient(t, tg.URL, 1)
		Check(t, "t=0", c.Get("/"), 200, H{XRemaining: "1"})
		clock.At(Sec(10))
		Check(t, "t=10", c.Get("/"), 200, H{XRemaining: "0"})
		clock.At(Sec(12))
		Check(t, "t=12", c.Get("/"), 429, H{RetryAfter: "18", XReset: "18"})
		clock.At(Sec(30))
		Check(t, "t=30", c.Get("/"), 200, H{XRemaining: "0"})
		clock.At(Sec(30.001))
		Check(t, "t=30.001", c.Get("/"), 429, H{RetryAfter: "10"})
	})
}

// ClockBackwardsHeaders — a clock stepped backwards neither hands out quota nor makes a
// field negative (header part): the key stands still until the clock
// catches up, its usage kept, and Retry-After is measured from the
// request's own time. Limit 5, W = 10 s, fixed window and sliding log.
func ClockBackwardsHeaders(t *testing.T, h Harness) {
	for _, alg := range []string{"fixed_window", "sliding_log"} {
		t.Run(alg, func(t *testing.T) {
			clock := NewClock()
			tg := h.Start(t, Setup{Options: httplimit.Options{
				Rules: OneRule(t, alg, 5, "10s", 0, ""),
				Keys:  httplimit.KeyConfig{TrustedProxies: Loopback},
				Clock: clock,
			}})
			c := NewClient(t, tg.URL, 1)
			run := func(peer string, back time.Duration, backRetry int) {
				clock.At(Sec(100))
				for i, s := range []step{A(4), A(3), A(2)} {
					expectStep(t, fmt.Sprintf("%s step 1 #%d", peer, i+1), c.Get("/", XFF(peer)...), s)
				}
				clock.At(back)
				for i, s := range []step{A(1), A(0), D(backRetry)} {
					expectStep(t, fmt.Sprintf("%s step 2 #%d", peer, i+1), c.Get("/", XFF(peer)...), s)
				}
				clock.At(Sec(105))
				expectStep(t, peer+" step 3", c.Get("/", XFF(peer)...), D(5))
				clock.At(Sec(110))
				expectStep(t, peer+" step 4", c.Get("/", XFF(peer)...), A(4))
			}
			run("192.0.2.30", Sec(95), 15)
			run("192.0.2.31", Sec(-3500), 3610)
		})
	}
}

// NegativeCost — a negative cost never refunds capacity (step 7): the cost
// function's -1 answers 500 and consumes nothing; 0 passes without
// consuming. Fixed window and sliding log, limit 5, W = 60 s.
func NegativeCost(t *testing.T, h Harness) {
	for _, alg := range []string{"fixed_window", "sliding_log"} {
		t.Run(alg, func(t *testing.T) {
			clock := NewClock()
			tg := h.Start(t, Setup{CostHeader: true, Options: httplimit.Options{
				Rules: OneRule(t, alg, 5, "60s", 0, ""),
				Clock: clock,
			}})
			c := NewClient(t, tg.URL, 1)
			cost := func(n int) []string { return []string{"X-Cost", strconv.Itoa(n)} }
			Check(t, "t=0 cost 3", c.Get("/", cost(3)...), 200, H{XRemaining: "2"})
			clock.At(Sec(1))
			r := c.Get("/", cost(-1)...)
			Check(t, "t=1 cost -1", r, 500, H{XRemaining: Absent, RetryAfter: Absent})
			if r.Body != mwengine.BodyBadCost {
				t.Errorf("t=1 cost -1: body %q", r.Body)
			}
			clock.At(Sec(2))
			Check(t, "t=2 cost 0", c.Get("/", cost(0)...), 200, H{XRemaining: "2", XLimit: "5"})
			clock.At(Sec(3))
			Check(t, "t=3 cost 3", c.Get("/", cost(3)...), 429, H{XRemaining: "2", RetryAfter: "57"})
			Check(t, "t=3 cost 2", c.Get("/", cost(2)...), 200, H{XRemaining: "0"})
			clock.At(Sec(4))
			Check(t, "t=4 cost 0 on an exhausted key", c.Get("/", cost(0)...), 200, H{XRemaining: "0"})
			Check(t, "t=4 cost 6 > limit", c.Get("/", cost(6)...), 429, H{RetryAfter: Absent, XLimit: "5"})
			if st := tg.Stats(); st.BadCost != 1 {
				t.Errorf("Stats.BadCost = %d, want 1", st.BadCost)
			}
		})
	}
}

// ZeroLimitHeaders — limit 0 admits nothing, and raising it later works (header
// part): a per-client override of 0 for identity "blocked", W = 60 s.
func ZeroLimitHeaders(t *testing.T, h Harness) {
	for _, ac := range []struct {
		alg string
		ra  string // Retry-After of the 4th call at t=100 after raising to 3
	}{{"fixed_window", "20"}, {"sliding_log", "60"}} {
		t.Run(ac.alg, func(t *testing.T) {
			clock := NewClock()
			rules := func(limit int) *httplimit.Rules {
				return OneRule(t, ac.alg, 5, "60s", 0, fmt.Sprintf(
					`"overrides": [{"rule": "r", "id": "blocked", "limit": %d}, {"id": "blocked-too", "limit": 0}]`, limit))
			}
			tg := h.Start(t, Setup{CostHeader: true, Options: httplimit.Options{
				Rules:   rules(0),
				Keys:    httplimit.KeyConfig{Header: "X-Client-ID"},
				Headers: httplimit.HeaderConfig{IETF: true},
				Clock:   clock,
			}})
			c := NewClient(t, tg.URL, 1)
			id := func(s string) []string { return []string{"X-Client-ID", s} }
			for _, at := range []float64{0, 1, 59.999, 60} {
				clock.At(Sec(at))
				for _, who := range []string{"blocked", "blocked-too"} {
					r := c.Get("/", id(who)...)
					Check(t, fmt.Sprintf("t=%v %s", at, who), r, 429, H{
						XLimit: "0", XRemaining: "0", RetryAfter: Absent, RLPolicy: `"r";q=0;w=60`,
					})
				}
				// A cost of 0 is a no-op: allowed, even on a limit of 0.
				Check(t, fmt.Sprintf("t=%v cost-0 probe", at), c.Get("/", append(id("blocked"), "X-Cost", "0")...), 200, H{XLimit: "0", XRemaining: "0"})
			}
			for i := range 50 {
				if r := c.Get("/", id("blocked")...); r.Status != 429 {
					t.Fatalf("call %d on a limit of 0: status %d", i, r.Status)
				}
			}
			clock.At(Sec(100))
			if err := tg.Reload(rules(3)); err != nil {
				t.Fatal(err)
			}
			for i, s := range []step{A(2), A(1), A(0)} {
				r := c.Get("/", id("blocked")...)
				expectStep(t, fmt.Sprintf("t=100 #%d", i+1), r, s)
				Check(t, fmt.Sprintf("t=100 #%d", i+1), r, 200, H{XLimit: "3"})
			}
			Check(t, "t=100 #4", c.Get("/", id("blocked")...), 429, H{RetryAfter: ac.ra, XLimit: "3"})
			clock.At(Sec(3600))
			Check(t, "t=3600 blocked-too", c.Get("/", id("blocked-too")...), 429, H{XLimit: "0", RetryAfter: Absent})
			Check(t, "t=3600 someone else", c.Get("/", id("other")...), 200, H{XLimit: "5", XRemaining: "4"})
		})
	}
}

// RuntimeLimitHeaders — a limit raised or lowered at runtime applies at once (header
// part): client "k" starts with an override of 2, W = 60 s; reloads set 5 at
// t=10 and 1 at t=20.
func RuntimeLimitHeaders(t *testing.T, h Harness) {
	type row struct {
		at     float64
		limit  int // override set by a reload before the calls (0: none)
		steps  []step
		header string // X-RateLimit-Limit of these responses
	}
	for _, ac := range []struct {
		alg  string
		rows []row
	}{
		{"fixed_window", []row{
			{0, 0, []step{A(1), A(0), D(60)}, "2"},
			{10, 5, []step{A(2), A(1), A(0), D(50)}, "5"},
			{20, 1, []step{D(40)}, "1"},
			{60, 0, []step{A(0)}, "1"},
			{70, 0, []step{D(50)}, "1"},
		}},
		{"sliding_log", []row{
			{0, 0, []step{A(1), A(0), D(60)}, "2"},
			{10, 5, []step{A(2), A(1), A(0), D(50)}, "5"},
			{20, 1, []step{D(50)}, "1"},
			{60, 0, []step{D(10)}, "1"},
			{70, 0, []step{A(0)}, "1"},
		}},
	} {
		t.Run(ac.alg, func(t *testing.T) {
			clock := NewClock()
			rules := func(limit int) *httplimit.Rules {
				return OneRule(t, ac.alg, 100, "60s", 0, fmt.Sprintf(`"overrides": [{"rule": "r", "id": "k", "limit": %d}]`, limit))
			}
			tg := h.Start(t, Setup{Options: httplimit.Options{
				Rules:   rules(2),
				Keys:    httplimit.KeyConfig{Header: "X-Client-ID"},
				Headers: httplimit.HeaderConfig{IETF: true},
				Clock:   clock,
			}})
			c := NewClient(t, tg.URL, 1)
			for _, rw := range ac.rows {
				clock.At(Sec(rw.at))
				if rw.limit > 0 {
					if err := tg.Reload(rules(rw.limit)); err != nil {
						t.Fatal(err)
					}
				}
				for i, s := range rw.steps {
					name := fmt.Sprintf("t=%v #%d", rw.at, i+1)
					r := c.Get("/", "X-Client-ID", "k")
					expectStep(t, name, r, s)
					Check(t, name, r, r.Status, H{XLimit: rw.header, RLPolicy: fmt.Sprintf(`"r";q=%s;w=60`, rw.header)})
				}
			}
		})
	}
}

// PerKeyLimit — a per-client limit drives the decision, not only the header:
// default 5, peer 203.0.113.7 overridden to 2, W = 60 s; fixed window and
// sliding log.
func PerKeyLimit(t *testing.T, h Harness) {
	for _, alg := range []string{"fixed_window", "sliding_log"} {
		t.Run(alg, func(t *testing.T) {
			clock := NewClock()
			tg := h.Start(t, Setup{Options: httplimit.Options{
				Rules:   OneRule(t, alg, 5, "60s", 0, `"overrides": [{"rule": "r", "ip": "203.0.113.7", "limit": 2}]`),
				Keys:    httplimit.KeyConfig{TrustedProxies: Loopback},
				Headers: httplimit.HeaderConfig{IETF: true},
				Clock:   clock,
			}})
			c := NewClient(t, tg.URL, 1)
			small := []step{A(1), A(0), D(58)}
			big := []step{A(4), A(3), A(2), A(1), A(0), D(55)}
			for i := range 6 {
				clock.At(Sec(float64(i)))
				if i < len(small) {
					name := fmt.Sprintf("203.0.113.7 t=%d", i)
					r := c.Get("/", XFF("203.0.113.7")...)
					expectStep(t, name, r, small[i])
					Check(t, name, r, r.Status, H{XLimit: "2", RLPolicy: `"r";q=2;w=60`})
				}
				name := fmt.Sprintf("198.51.100.9 t=%d", i)
				r := c.Get("/", XFF("198.51.100.9")...)
				expectStep(t, name, r, big[i])
				Check(t, name, r, r.Status, H{XLimit: "5", RLPolicy: `"r";q=5;w=60`})
			}
		})
	}
}

// IPv6Prefix — IPv6 clients are keyed per /64 (configurable), IPv4-mapped
// IPv6 as IPv4, IPv4 per /32: fixed window, limit 2, W = 60 s. The server
// listens on [::1] when available, so the proxy hop itself is IPv6.
func IPv6Prefix(t *testing.T, h Harness) {
	clock := NewClock()
	tg := h.Start(t, Setup{IPv6: true, Options: httplimit.Options{
		Rules: OneRule(t, "fixed_window", 2, "60s", 0, ""),
		Keys:  httplimit.KeyConfig{TrustedProxies: Loopback},
		Clock: clock,
	}})
	t.Logf("server on %s (IPv6 listener: %v)", tg.URL, tg.IPv6)
	c := NewClient(t, tg.URL, 1)
	rows := []struct {
		peer string
		s    step
	}{
		{"2001:db8:abcd:12::1", A(1)},
		{"2001:db8:abcd:12:ffff:ffff:ffff:fffe", A(0)},
		{"2001:db8:abcd:12::dead:beef", D(58)},
		{"2001:db8:abcd:13::1", A(1)},
		{"2001:DB8:ABCD:13:0:0:0:2", A(0)},
		{"2001:db8:abcd:13::3", D(55)},
		{"::ffff:192.0.2.1", A(1)},
		{"192.0.2.1", A(0)},
		{"::ffff:c000:201", D(52)},
		{"192.0.2.2", A(1)},
	}
	for i, row := range rows {
		clock.At(Sec(float64(i)))
		expectStep(t, fmt.Sprintf("t=%d %s", i, row.peer), c.Get("/", XFF(row.peer)...), row.s)
	}
	// The loopback peer itself, with no forwarding header: one key.
	expectStep(t, "loopback #1", c.Get("/"), A(1))
	expectStep(t, "loopback #2", c.Get("/"), A(0))

	t.Run("prefix/56", func(t *testing.T) {
		clock := NewClock()
		tg := h.Start(t, Setup{IPv6: true, Options: httplimit.Options{
			Rules: OneRule(t, "fixed_window", 2, "60s", 0, ""),
			Keys:  httplimit.KeyConfig{TrustedProxies: Loopback, IPv6Prefix: 56},
			Clock: clock,
		}})
		c := NewClient(t, tg.URL, 1)
		expectStep(t, "2001:db8:abcd:12::1", c.Get("/", XFF("2001:db8:abcd:12::1")...), A(1))
		expectStep(t, "2001:db8:abcd:13::1", c.Get("/", XFF("2001:db8:abcd:13::1")...), A(0))
		expectStep(t, "2001:db8:abcd:100::1", c.Get("/", XFF("2001:db8:abcd:100::1")...), A(1))
	})
}

// ConcurrentConnections — concurrent requests never crash the server (middleware part,
// bounded): conns concurrent connections each send perConn requests, spread
// evenly over 64 peers and two rules (sliding log, limit 5, and sliding
// counter, limit 10, per 1 s), in two rounds: with the injected clock at T0,
// then 2 s later, when every window has ended. The clock stands still within
// a round, so each peer and rule admits exactly min(sent, limit) per round,
// whatever the machine's speed: every response is 200 or 429, the admitted
// total is exact and Stats agree.
func ConcurrentConnections(t *testing.T, h Harness, conns, perConn int) {
	rules := MustRules(t, `{"rules": [
		{"name": "log", "prefix": "/log", "algorithm": "sliding_log", "limit": 5, "window": "1s"},
		{"name": "counter", "prefix": "/counter", "algorithm": "sliding_counter", "limit": 10, "window": "1s", "buckets": 10}
	]}`)
	const peers = 64
	paths := [2]string{"/log", "/counter"}
	limits := [2]int{5, 10}
	clock := NewClock()
	tg := h.Start(t, Setup{Options: httplimit.Options{Rules: rules, Keys: httplimit.KeyConfig{TrustedProxies: Loopback}, Clock: clock}})
	c := NewClient(t, tg.URL, conns)
	// Request i of connection g goes to pair (g + i*conns) mod 2*peers: every
	// pair gets the same number of requests, give or take one.
	pair := func(g, i int) int { return (g + i*conns) % (2 * peers) }
	sent := make([]int, 2*peers)
	for g := range conns {
		for i := range perConn {
			sent[pair(g, i)]++
		}
	}
	wantOK := 0
	for p, n := range sent {
		if n <= limits[p%2] {
			t.Fatalf("pair %d gets %d requests, not more than its limit %d: raise conns*perConn", p, n, limits[p%2])
		}
		wantOK += limits[p%2]
	}
	var total tally
	for round := range 2 {
		clock.At(time.Duration(round) * 2 * time.Second)
		rt := sendRound(c, conns, perConn, func(g, i int) (string, string) {
			p := pair(g, i)
			return paths[p%2], fmt.Sprintf("198.18.0.%d", p/2)
		})
		t.Logf("round %d, %d connections x %d requests: %d admitted, %d limited, %d other", round, conns, perConn, rt.ok, rt.limited, rt.other)
		if rt.other != 0 {
			t.Errorf("round %d: %d responses neither 200 nor 429 (or transport errors)", round, rt.other)
		}
		if rt.ok != wantOK || rt.limited != conns*perConn-wantOK {
			t.Errorf("round %d: %d admitted and %d limited, want exactly %d and %d", round, rt.ok, rt.limited, wantOK, conns*perConn-wantOK)
		}
		total.ok += rt.ok
		total.limited += rt.limited
	}
	st := tg.Stats()
	if st.Allowed != uint64(total.ok) || st.Denied != uint64(total.limited) || st.Errors != 0 {
		t.Errorf("Stats %+v do not match %d admitted, %d denied", st, total.ok, total.limited)
	}
}

// tally counts responses: 200, 429, and anything else or a transport
// error.
type tally struct{ ok, limited, other int }

// sendRound sends perConn requests on each of conns connections of c at
// once, request i of connection g to the path and from the client address
// that target(g, i) returns, and tallies the answers.
func sendRound(c *Client, conns, perConn int, target func(g, i int) (path, ip string)) tally {
	results := make(chan tally, conns)
	for g := range conns {
		go func() {
			var tl tally
			for i := range perConn {
				path, ip := target(g, i)
				r, err := c.Do("GET", path, XFF(ip)...)
				switch {
				case err != nil:
					tl.other++
				case r.Status == 200:
					tl.ok++
				case r.Status == 429:
					tl.limited++
				default:
					tl.other++
				}
			}
			results <- tl
		}()
	}
	var rt tally
	for range conns {
		tl := <-results
		rt.ok += tl.ok
		rt.limited += tl.limited
		rt.other += tl.other
	}
	return rt
}

// SubSecondWindowHeaders — a sub-second window is not truncated to zero (header part):
// limit 2, W = 500 ms; RateLimit-Policy w=1, Retry-After never 0.
func SubSecondWindowHeaders(t *testing.T, h Harness) {
	for _, ac := range []struct {
		alg     string
		buckets int
		at05    []step
	}{
		{"fixed_window", 0, []step{A(1), A(0), D(1)}},
		{"sliding_log", 0, []step{A(1), A(0), D(1)}},
		{"sliding_counter", 5, []step{D(1), D(1), D(1)}},
	} {
		t.Run(ac.alg, func(t *testing.T) {
			clock := NewClock()
			tg := h.Start(t, Setup{Options: httplimit.Options{
				Rules:   OneRule(t, ac.alg, 2, "500ms", ac.buckets, ""),
				Headers: httplimit.HeaderConfig{IETF: true, Verbose: true},
				Clock:   clock,
			}})
			c := NewClient(t, tg.URL, 1)
			check := func(name string, s step) {
				t.Helper()
				r := c.Get("/")
				expectStep(t, name, r, s)
				Check(t, name, r, r.Status, H{RLPolicy: `"r";q=2;w=1`, XWindowMs: "500", XStrategy: ac.alg})
				if v := r.Header.Get(XReset); v == "0" && !s.allowed {
					t.Errorf("%s: X-RateLimit-Reset 0 on a denial", name)
				}
			}
			for i, s := range []step{A(1), A(0), D(1)} {
				check(fmt.Sprintf("t=0 #%d", i+1), s)
			}
			clock.At(Sec(0.25))
			check("t=0.25", D(1))
			clock.At(Sec(0.5))
			for i, s := range ac.at05 {
				check(fmt.Sprintf("t=0.5 #%d", i+1), s)
			}
			clock.At(Sec(1))
			check("t=1", A(1))
		})
	}
}

// YearWindowHeaders — a one-year window is not shortened (header part): W = 365 d,
// limit 5, fixed window, sliding log and sliding counter (365 buckets).
func YearWindowHeaders(t *testing.T, h Harness) {
	const year = 31_536_000
	for _, ac := range []struct {
		alg     string
		buckets int
		ra0     int    // Retry-After of the 6th call at t=0
		reset0  string // X-RateLimit-Reset of that call (seconds to go)
		later   []step // at t = 2,160,000, 31,535,999 and 31,536,000
	}{
		{"fixed_window", 0, year, "31536000", []step{D(29_376_000), D(1), A(4)}},
		{"sliding_log", 0, year, "31536000", []step{D(29_376_000), D(1), A(4)}},
		{"sliding_counter", 365, 31_553_280, "", []step{D(29_393_280), D(17_281), D(17_280)}},
	} {
		t.Run(ac.alg, func(t *testing.T) {
			for _, unix := range []bool{false, true} {
				clock := NewClock()
				tg := h.Start(t, Setup{Options: httplimit.Options{
					Rules:   OneRule(t, ac.alg, 5, "8760h", ac.buckets, ""),
					Headers: httplimit.HeaderConfig{IETF: true, ResetUnix: unix},
					Clock:   clock,
				}})
				c := NewClient(t, tg.URL, 1)
				for i, s := range []step{A(4), A(3), A(2), A(1), A(0), D(ac.ra0)} {
					r := c.Get("/")
					expectStep(t, fmt.Sprintf("t=0 #%d", i+1), r, s)
					Check(t, "t=0", r, r.Status, H{RLPolicy: `"r";q=5;w=31536000`})
					if i == 5 && ac.reset0 != "" {
						want := ac.reset0
						if unix {
							want = "1766016000"
						}
						Check(t, "t=0 #6", r, 429, H{XReset: want})
					}
				}
				for i, at := range []int64{2_160_000, year - 1, year} {
					clock.At(time.Duration(at) * time.Second)
					expectStep(t, fmt.Sprintf("t=%d", at), c.Get("/"), ac.later[i])
				}
			}
		})
	}
}
