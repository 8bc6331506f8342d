package mwtest

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// atomicSets returns the two rule sets ReloadIsAtomic switches between.
// Both have the one catch-all rule "r" (so its limiter, and every client's
// counters, are kept), and differ in everything a response shows: set A
// gives every client 1,000,000 per minute under policy "a"; set B gives
// 2,000,000 under policy "b" and blocks client 192.0.2.66 with an override
// of 0. Each also overrides 1,000 other addresses, with limits that differ
// between the sets, so a reload has many limits to change.
func atomicSets() [2]*httplimit.Rules {
	var sets [2]*httplimit.Rules
	for i, s := range []struct {
		policy string
		limit  int
		other  int
	}{{"a", 1_000_000, 7}, {"b", 2_000_000, 9}} {
		r := &httplimit.Rules{Rules: []httplimit.Rule{{
			Name: "r", Algorithm: shardlimit.FixedWindow, Limit: s.limit, Window: time.Minute, Policy: s.policy,
		}}}
		for j := range 1000 {
			ip := netip.AddrFrom4([4]byte{198, 18, byte(j / 256), byte(j)})
			r.Overrides = append(r.Overrides, httplimit.Override{Rule: "r", IP: ip.String(), Limit: s.other})
		}
		if i == 1 {
			r.Overrides = append(r.Overrides, httplimit.Override{Rule: "r", IP: "192.0.2.66", Limit: 0})
		}
		sets[i] = r
	}
	return sets
}

// atomicAnswer is what a response shows of the rule set that decided it.
type atomicAnswer struct {
	status int
	limit  string // X-RateLimit-Limit
	policy string // RateLimit-Policy
}

// atomicWant[set][client] is the answer of each set to each client:
// 192.0.2.65 is allowed under both; 192.0.2.66 is blocked by set B.
var atomicWant = [2]map[string]atomicAnswer{
	{"192.0.2.65": {200, "1000000", `"a";q=1000000;w=60`}, "192.0.2.66": {200, "1000000", `"a";q=1000000;w=60`}},
	{"192.0.2.65": {200, "2000000", `"b";q=2000000;w=60`}, "192.0.2.66": {429, "0", `"b";q=0;w=60`}},
}

// ReloadIsAtomic races requests against reloads and checks that each
// response was decided entirely under one rule set: its status,
// X-RateLimit-Limit and RateLimit-Policy are those of one set, never a mix
// (the old set's rule and policy with the new set's limits, or the
// reverse). Reloads switch between two sets (see atomicSets) while
// goroutines send requests from two clients; a request sent after a Reload
// returned and answered before the next one began must show exactly the
// set that Reload put in force. Between reloads the test waits for such a
// response, so every reload is raced and both sets are seen whatever the
// machine's speed.
func ReloadIsAtomic(t *testing.T, h Harness) {
	const (
		reloads = 60
		senders = 4
	)
	sets := atomicSets()
	tg := h.Start(t, Setup{Options: httplimit.Options{
		Rules:   sets[0],
		Keys:    httplimit.KeyConfig{TrustedProxies: Loopback},
		Headers: httplimit.HeaderConfig{IETF: true},
		Clock:   NewClock(),
	}})
	race := &reloadRace{
		c:        NewClient(t, tg.URL, senders),
		fresh:    make(chan int64, senders),
		stop:     make(chan struct{}),
		failures: make(chan string, senders),
	}
	for g := range senders {
		race.wg.Add(1)
		go race.send(g)
	}
	race.waitFresh(t, 0)
	for i := 1; i <= reloads; i++ {
		race.reloading.Store(true)
		err := tg.Reload(sets[i%2])
		race.gen.Add(1)
		race.reloading.Store(false)
		if err != nil {
			race.fail(t, "reload %d: %v", i, err)
		}
		race.waitFresh(t, int64(i))
	}
	race.halt()
	select {
	case f := <-race.failures:
		t.Fatal(f)
	default:
	}
	t.Logf("%d reloads: %d answers under set A, %d under set B", reloads, race.answered[0].Load(), race.answered[1].Load())
}

// reloadRace is ReloadIsAtomic's race of senders against reloads.
//
// gen is the number of reloads that have returned; set gen%2 is in force
// from then until the next reload begins. reloading is set while a reload
// runs (set before it starts, cleared after gen counts it). A sender reads
// gen then reloading before its request, reloading then gen after it: if
// it reads the same gen twice and reloading false twice, no reload
// published a set while the request was under way.
type reloadRace struct {
	c         *Client
	gen       atomic.Int64
	reloading atomic.Bool
	fresh     chan int64    // gens of responses that saw no reload
	stop      chan struct{} // closed to stop the senders
	failures  chan string
	answered  [2]atomic.Int64 // answers under each set
	wg        sync.WaitGroup
}

// send sends requests, as sender g, until stop is closed or one fails.
func (rr *reloadRace) send(g int) {
	defer rr.wg.Done()
	for i := 0; ; i++ {
		select {
		case <-rr.stop:
			return
		default:
		}
		if msg := rr.sendOne([]string{"192.0.2.65", "192.0.2.66"}[(g+i)%2]); msg != "" {
			rr.failures <- msg
			return
		}
	}
}

// sendOne sends one request from client and checks its answer; it returns
// what went wrong, or "".
func (rr *reloadRace) sendOne(client string) string {
	before, busyBefore := rr.gen.Load(), rr.reloading.Load()
	r, err := rr.c.Do("GET", "/", XFF(client)...)
	busyAfter := rr.reloading.Load() // before gen: see reloadRace's doc
	after := rr.gen.Load()
	if err != nil {
		return fmt.Sprintf("GET from %s: %v", client, err)
	}
	got := atomicAnswer{r.Status, r.Header.Get(XLimit), r.Header.Get(RLPolicy)}
	set := -1
	for i := range atomicWant {
		if got == atomicWant[i][client] {
			set = i
		}
	}
	if set < 0 {
		return fmt.Sprintf("client %s: answer %+v is neither set A's %+v nor set B's %+v",
			client, got, atomicWant[0][client], atomicWant[1][client])
	}
	rr.answered[set].Add(1)
	if before != after || busyBefore || busyAfter {
		return "" // a reload ran while this request did
	}
	if want := int(before % 2); set != want {
		return fmt.Sprintf("client %s, sent and answered while set %c was in force: answer %+v of set %c",
			client, 'A'+want, got, 'A'+set)
	}
	select {
	case rr.fresh <- before:
	default:
	}
	return ""
}

// halt stops the senders and waits for them.
func (rr *reloadRace) halt() {
	close(rr.stop)
	rr.wg.Wait()
}

// fail stops the senders and fails the test.
func (rr *reloadRace) fail(t *testing.T, format string, args ...any) {
	t.Helper()
	rr.halt()
	t.Fatalf(format, args...)
}

// waitFresh waits for a response decided wholly under reload g's set.
func (rr *reloadRace) waitFresh(t *testing.T, g int64) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case got := <-rr.fresh:
			if got == g {
				return
			}
		case f := <-rr.failures:
			rr.fail(t, "%s", f)
		case <-timeout:
			rr.fail(t, "no response under the rule set of reload %d within 30 s", g)
		}
	}
}
