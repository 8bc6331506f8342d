package mwengine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// banEngine returns an engine whose clock is a manual one at t0, with the
// rules js.
func banEngine(t *testing.T, js string, o httplimit.Options) (*Engine, *shardlimit.ManualClock) {
	t.Helper()
	clk := shardlimit.NewManualClock(t0)
	o.Rules, o.Clock = mustParse(t, js), clk
	return newTestEngine(t, o), clk
}

// at decides a request of client ip on path at t0+d, with the engine's
// clock set there.
func at(e *Engine, clk *shardlimit.ManualClock, ip, path string, d time.Duration) Outcome {
	clk.Set(t0.Add(d))
	o := decide(e, ip, "", path, d, 1)
	e.Release(o.InFlight)
	return o
}

const banRules = `{"rules": [{"name": "a", "path": "/a", "limit": 1, "window": "1m",
	"ban": {"after": 3, "within": "1m", "for": "10m", "growth": 2, "max": "25m"}},
	{"name": "b", "path": "/b", "limit": 1, "window": "1m"}]}`

// TestBanAfterViolations checks that After denials within Within ban the
// client for For, that the ban grows on repeat offences up to Max, that a
// banned request does not reach the limiter and gets Retry-After the rest
// of the ban, and that other clients and rules are untouched.
func TestBanAfterViolations(t *testing.T) {
	e, clk := banEngine(t, banRules, httplimit.Options{})
	const ip = "192.0.2.1"
	type step struct {
		at   time.Duration
		want httplimit.Action
		rest time.Duration // RetryAfter of a banned answer
	}
	sec, min := time.Second, time.Minute
	steps := []step{
		{0, httplimit.ActionAllow, 0},
		{1 * sec, httplimit.ActionDeny, 0}, {2 * sec, httplimit.ActionDeny, 0}, {3 * sec, httplimit.ActionDeny, 0},
		// Banned from 3s for 10m.
		{4 * sec, httplimit.ActionBanned, 10*min - sec},
		{3*sec + 10*min - 1, httplimit.ActionBanned, 1},
		// Ban over; a new window of the limit.
		{3*sec + 10*min, httplimit.ActionAllow, 0},
		{10*min + 10*sec, httplimit.ActionDeny, 0}, {10*min + 20*sec, httplimit.ActionDeny, 0}, {10*min + 30*sec, httplimit.ActionDeny, 0},
		// The second ban: 20m.
		{10*min + 31*sec, httplimit.ActionBanned, 20*min - sec},
		{30*min + 30*sec, httplimit.ActionAllow, 0},
		{30*min + 31*sec, httplimit.ActionDeny, 0}, {30*min + 32*sec, httplimit.ActionDeny, 0}, {30*min + 33*sec, httplimit.ActionDeny, 0},
		// The third: 40m, capped at 25m.
		{30*min + 33*sec + 25*min - 1, httplimit.ActionBanned, 1},
	}
	for i, s := range steps {
		o := at(e, clk, ip, "/a", s.at)
		if o.Action != s.want {
			t.Fatalf("step %d at %v: %v, want %v", i, s.at, o.Action, s.want)
		}
		if s.want == httplimit.ActionBanned && (o.Result.RetryAfter != s.rest || o.Result.Remaining != 0 || o.Result.Limit != 1) {
			t.Fatalf("step %d at %v: result %+v, want RetryAfter %v", i, s.at, o.Result, s.rest)
		}
	}
	// Another client, and the same client on another rule, are not banned.
	clk.Set(t0.Add(57 * min))
	if o := at(e, clk, "192.0.2.2", "/a", 57*min); o.Action != httplimit.ActionAllow {
		t.Errorf("another client: %v", o.Action)
	}
	if o := at(e, clk, ip, "/b", 57*min); o.Action != httplimit.ActionAllow {
		t.Errorf("another rule: %v", o.Action)
	}
	if st := e.PolicyStats(); st.BansStarted != 3 || st.Banned != 4 {
		t.Errorf("stats %+v, want 3 bans started, 4 requests banned", st)
	}
}

// TestBanWindow checks that denials further apart than Within do not ban,
// that an instant behind the key's latest counts at the latest, and that
// the offences are forgotten after a clean spell of Max.
func TestBanWindow(t *testing.T) {
	e, clk := banEngine(t, `{"rules": [{"name": "a", "path": "/a", "limit": 0, "window": "1m",
		"ban": {"after": 2, "within": "10s", "for": "1m", "growth": 3, "max": "5m"}}]}`, httplimit.Options{})
	const ip = "192.0.2.1"
	for i, d := range []time.Duration{0, 10 * time.Second, 20 * time.Second, 30 * time.Second} {
		if o := at(e, clk, ip, "/a", d); o.Action != httplimit.ActionDeny {
			t.Fatalf("denial %d at %v: %v", i, d, o.Action)
		}
	}
	// An instant behind the latest (30s) is counted at 30s: a second
	// denial within 10s, so a ban of 1m from 30s.
	if o := at(e, clk, ip, "/a", 25*time.Second); o.Action != httplimit.ActionDeny {
		t.Fatalf("early denial: %v", o.Action)
	}
	// ResetAfter is the rest of the ban; RetryAfter is Never, as a limit
	// of 0 never admits the retry.
	if o := at(e, clk, ip, "/a", 31*time.Second); o.Action != httplimit.ActionBanned || o.Result.ResetAfter != 59*time.Second || o.Result.RetryAfter != shardlimit.Never {
		t.Fatalf("after the early denial: %v %v %v, want banned for 59s, RetryAfter Never", o.Action, o.Result.ResetAfter, o.Result.RetryAfter)
	}
	// A second offence right after: 3m.
	at(e, clk, ip, "/a", 91*time.Second)
	at(e, clk, ip, "/a", 92*time.Second)
	if o := at(e, clk, ip, "/a", 93*time.Second); o.Result.ResetAfter != 3*time.Minute-time.Second {
		t.Fatalf("second ban: %v %v, want 2m59s", o.Action, o.Result.ResetAfter)
	}
	// Ends at 4m32s; after a clean spell of Max (5m) the next is a first.
	end := 92*time.Second + 3*time.Minute
	at(e, clk, ip, "/a", end+5*time.Minute)
	at(e, clk, ip, "/a", end+5*time.Minute+time.Second)
	if o := at(e, clk, ip, "/a", end+5*time.Minute+2*time.Second); o.Result.ResetAfter != time.Minute-time.Second {
		t.Fatalf("ban after a clean spell: %v %v, want 59s", o.Action, o.Result.ResetAfter)
	}
}

// TestBanAPI checks Bans, SetBan and LiftBan, and their errors.
func TestBanAPI(t *testing.T) {
	e, clk := banEngine(t, banRules, httplimit.Options{Keys: httplimit.KeyConfig{Header: "X-Id", UnknownIdentity: httplimit.UnknownIdentityOwnKey}})
	if err := e.SetBan("b", "ip:192.0.2.9", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := e.SetBan("a", "id:client-1", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	// A single IPv6 address is grouped by /64, and so is a narrower
	// network.
	if err := e.SetBan("a", "ip:2001:db8::1", 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := e.SetBan("a", "ip:2001:db8::8000/120", time.Minute); err != nil {
		t.Fatal(err)
	}
	clk.Set(t0.Add(time.Second))
	got := e.Bans()
	want := []httplimit.BanEntry{
		{Rule: "a", Key: "id:client-1", Until: t0.Add(2 * time.Minute), Remaining: 2*time.Minute - time.Second},
		{Rule: "a", Key: "ip:2001:db8::/64", Until: t0.Add(3 * time.Minute), Remaining: 3*time.Minute - time.Second},
		{Rule: "b", Key: "ip:192.0.2.9", Until: t0.Add(time.Minute), Remaining: time.Minute - time.Second},
	}
	if !slices.EqualFunc(got, want, func(a, b httplimit.BanEntry) bool {
		return a == b || (a.Rule == b.Rule && a.Key == b.Key && a.Until.Equal(b.Until) && a.Remaining == b.Remaining)
	}) {
		t.Fatalf("Bans() = %+v, want %+v", got, want)
	}
	// A rule without a Ban enforces a set ban.
	if o := at(e, clk, "192.0.2.9", "/b", time.Second); o.Action != httplimit.ActionBanned {
		t.Fatalf("set ban on rule b: %v", o.Action)
	}
	if o := at(e, clk, "2001:db8::77", "/a", time.Second); o.Action != httplimit.ActionBanned {
		t.Fatalf("set ban of a /64: %v", o.Action)
	}
	if was, err := e.LiftBan("b", "ip:192.0.2.9"); !was || err != nil {
		t.Fatalf("LiftBan: %v %v", was, err)
	}
	if was, err := e.LiftBan("b", "ip:192.0.2.9"); was || err != nil {
		t.Fatalf("LiftBan again: %v %v", was, err)
	}
	if o := at(e, clk, "192.0.2.9", "/b", time.Second); o.Action != httplimit.ActionAllow {
		t.Fatalf("after LiftBan: %v", o.Action)
	}
	if n := len(e.Bans()); n != 2 {
		t.Fatalf("%d bans after a lift, want 2", n)
	}
	for _, tc := range []struct {
		rule, key string
		d         time.Duration
	}{
		{"nope", "ip:192.0.2.1", time.Minute}, {"a", "192.0.2.1", time.Minute}, {"a", "ip:x", time.Minute},
		{"a", "ip:192.0.2.1", 0}, {"a", "ip:192.0.2.1", -time.Second}, {"a", "ip:192.0.2.1", httplimit.MaxBanDuration + 1},
		{"a", "id:" + string(make([]byte, 200)), time.Minute},
		{"a", "ip:2001:db8::/48", time.Minute}, // wider than a client's /64
	} {
		if err := e.SetBan(tc.rule, tc.key, tc.d); !errors.Is(err, shardlimit.ErrInvalidConfig) {
			t.Errorf("SetBan(%q, %q, %v): %v, want ErrInvalidConfig", tc.rule, tc.key, tc.d, err)
		}
	}
	if _, err := e.LiftBan("nope", "ip:192.0.2.1"); !errors.Is(err, shardlimit.ErrInvalidConfig) {
		t.Errorf("LiftBan of an unknown rule: %v", err)
	}
	e.Close()
	if err := e.SetBan("a", "ip:192.0.2.1", time.Minute); !errors.Is(err, shardlimit.ErrClosed) {
		t.Errorf("SetBan after Close: %v", err)
	}
}

// TestBanTableFull checks that a flood of distinct violators cannot grow
// the ban table past its cap, never drops a ban in force for room, and
// counts what it could not track; SetBan then fails with ErrTooManyKeys.
func TestBanTableFull(t *testing.T) {
	e, clk := banEngine(t, `{"rules": [{"name": "a", "path": "/a", "limit": 0, "window": "1m",
		"ban": {"after": 1, "within": "1m", "for": "1h"}}]}`, httplimit.Options{MaxPolicyKeys: 16})
	const flood = 1000
	for i := range flood {
		at(e, clk, fmt.Sprintf("10.0.%d.%d", i/256, i%256), "/a", time.Second)
	}
	bans := e.Bans()
	st := e.PolicyStats()
	if len(bans) > 16 || int(st.BansStarted) != len(bans) || int(st.ViolationsUntracked) != flood-len(bans) {
		t.Fatalf("%d bans, stats %+v: want at most 16, the rest untracked", len(bans), st)
	}
	// The first ones stay banned.
	if o := at(e, clk, "10.0.0.0", "/a", 2*time.Second); o.Action != httplimit.ActionBanned {
		t.Fatalf("first violator: %v", o.Action)
	}
	if err := e.SetBan("a", "ip:192.0.2.1", time.Minute); !errors.Is(err, shardlimit.ErrTooManyKeys) {
		t.Fatalf("SetBan into a full table: %v", err)
	}
	// Once the bans end, their room is reclaimed.
	clk.Set(t0.Add(3 * time.Hour))
	if err := e.SetBan("a", "ip:192.0.2.1", time.Minute); err != nil {
		t.Fatalf("SetBan after the bans ended: %v", err)
	}
}

// TestDryRunNeverBans checks that denials let through by DryRun never
// ban.
func TestDryRunNeverBans(t *testing.T) {
	e, clk := banEngine(t, banRules, httplimit.Options{DryRun: true})
	for i := range 10 {
		if o := at(e, clk, "192.0.2.1", "/a", time.Duration(i)*time.Second); i > 0 && o.Action != httplimit.ActionDryRunDeny {
			t.Fatalf("request %d: %v", i, o.Action)
		}
	}
	if n := len(e.Bans()); n != 0 {
		t.Fatalf("%d bans under DryRun", n)
	}
}

// TestInFlight checks the concurrency limit: slots taken up to Limit,
// refused beyond with the rule's status and Retry-After, given back on
// Release and at once when the limiter denies.
func TestInFlight(t *testing.T) {
	e, clk := banEngine(t, `{"rules": [{"name": "a", "path": "/a", "limit": 3, "window": "1m",
		"concurrency": {"limit": 2, "status": 503, "retry_after": "2s"}}]}`, httplimit.Options{})
	clk.Set(t0)
	o1 := decide(e, "192.0.2.1", "", "/a", 0, 1)
	o2 := decide(e, "192.0.2.1", "", "/a", 0, 1)
	o3 := decide(e, "192.0.2.1", "", "/a", 0, 1)
	if !o1.InFlight.Held() || !o2.InFlight.Held() || o3.InFlight.Held() || o3.Action != httplimit.ActionTooManyInFlight {
		t.Fatalf("third request: %v, held %v %v %v", o3.Action, o1.InFlight.Held(), o2.InFlight.Held(), o3.InFlight.Held())
	}
	if n := e.InFlightCount("a", "ip:192.0.2.1"); n != 2 {
		t.Fatalf("%d in flight, want 2", n)
	}
	sc := e.GetScratch()
	rp := e.Reply(sc, &o3, false)
	if rp.Status != 503 || sc.Fields.Len() != 1 || string(sc.Fields.Value(0)) != "2" {
		t.Fatalf("reply %d with %d fields", rp.Status, sc.Fields.Len())
	}
	e.PutScratch(sc)
	// Another client has slots of its own.
	if o := decide(e, "192.0.2.2", "", "/a", 0, 1); !o.InFlight.Held() {
		t.Fatalf("another client: %v", o.Action)
	} else {
		e.Release(o.InFlight)
	}
	e.Release(o1.InFlight)
	o4 := decide(e, "192.0.2.1", "", "/a", 0, 1) // the limit's third unit
	e.Release(o2.InFlight)
	o5 := decide(e, "192.0.2.1", "", "/a", 0, 1) // denied by the limit: no slot kept
	if !o4.InFlight.Held() || o5.Action != httplimit.ActionDeny || o5.InFlight.Held() {
		t.Fatalf("after a release: %v %v", o4.Action, o5.Action)
	}
	e.Release(o4.InFlight)
	if n := e.InFlightCount("a", "ip:192.0.2.1"); n != 0 {
		t.Fatalf("%d in flight after every release, want 0", n)
	}
}

// TestInFlightConcurrent checks, under many goroutines, that no client
// ever has more than Limit in flight and that every slot is given back.
func TestInFlightConcurrent(t *testing.T) {
	e, _ := banEngine(t, `{"rules": [{"name": "a", "path": "/a", "limit": 1000000000, "window": "1h",
		"concurrency": {"limit": 3}}]}`, httplimit.Options{})
	var mu sync.Mutex
	inside, most := 0, 0
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				o := decide(e, "192.0.2.1", "", "/a", 0, 1)
				if !o.InFlight.Held() {
					continue
				}
				mu.Lock()
				inside++
				most = max(most, inside)
				mu.Unlock()
				mu.Lock()
				inside--
				mu.Unlock()
				e.Release(o.InFlight)
			}
			_ = g
		}()
	}
	wg.Wait()
	if most > 3 || e.InFlightCount("a", "ip:192.0.2.1") != 0 {
		t.Fatalf("at most %d inside (limit 3), %d left in flight", most, e.InFlightCount("a", "ip:192.0.2.1"))
	}
}

// TestInFlightTableFull checks that a client needing room in a full
// in-flight table is refused, never admitted uncounted.
func TestInFlightTableFull(t *testing.T) {
	e, _ := banEngine(t, `{"rules": [{"name": "a", "path": "/a", "limit": 100, "window": "1m",
		"concurrency": {"limit": 1}}]}`, httplimit.Options{MaxPolicyKeys: 4})
	var held []InFlight
	for i := range 4 {
		o := decide(e, fmt.Sprintf("192.0.2.%d", i), "", "/a", 0, 1)
		if !o.InFlight.Held() {
			t.Fatalf("client %d: %v", i, o.Action)
		}
		held = append(held, o.InFlight)
	}
	if o := decide(e, "192.0.2.99", "", "/a", 0, 1); o.Action != httplimit.ActionTooManyInFlight {
		t.Fatalf("a fifth client in a table of 4: %v", o.Action)
	}
	if st := e.PolicyStats(); st.InFlightTableFull != 1 {
		t.Fatalf("stats %+v", st)
	}
	e.Release(held[0])
	if o := decide(e, "192.0.2.99", "", "/a", 0, 1); !o.InFlight.Held() {
		t.Fatalf("after a release: %v", o.Action)
	} else {
		held = append(held, o.InFlight)
	}
	for _, f := range held[1:] {
		e.Release(f)
	}
}

// memStore is an in-memory httplimit.BanStore, shared by engines as a
// Redis would be.
type memStore struct {
	mu       sync.Mutex
	bans     map[[2]string]time.Time
	fail     bool // every call fails
	failLift bool // LiftBan fails
}

func newMemStore() *memStore { return &memStore{bans: map[[2]string]time.Time{}} }

var errStoreDown = errors.New("store down")

func (m *memStore) PutBan(_ context.Context, b httplimit.StoredBan, _ time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail {
		return errStoreDown
	}
	k := [2]string{b.Namespace, b.Key}
	if b.Until.After(m.bans[k]) {
		m.bans[k] = b.Until
	}
	return nil
}

func (m *memStore) LiftBan(_ context.Context, ns, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail || m.failLift {
		return errStoreDown
	}
	delete(m.bans, [2]string{ns, key})
	return nil
}

func (m *memStore) ActiveBans(_ context.Context, now time.Time, limit int) ([]httplimit.StoredBan, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail {
		return nil, false, errStoreDown
	}
	var out []httplimit.StoredBan
	for k, u := range m.bans {
		if u.After(now) {
			if len(out) == limit {
				return out, false, nil
			}
			out = append(out, httplimit.StoredBan{Namespace: k[0], Key: k[1], Until: u})
		}
	}
	return out, true, nil
}

// waitFor waits, at most 10s, until cond holds, checking it every
// millisecond: for the events of a goroutine that reports them only
// through counters.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 10_000; i++ {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// readAfter waits until e has completed two more reads of its BanStore:
// one of them began after this call.
func readAfter(t *testing.T, e *Engine) {
	t.Helper()
	r0 := e.PolicyStats().StoreReads
	waitFor(t, "two reads of the ban store", func() bool { return e.PolicyStats().StoreReads >= r0+2 })
}

// TestBanShare checks bans shared through a BanStore: a ban started on
// one engine is enforced by another, survives the first one's restart,
// and a lift on one is a lift on both.
func TestBanShare(t *testing.T) {
	store := newMemStore()
	o := httplimit.Options{BanStore: store, BanSyncInterval: 5 * time.Millisecond}
	a, clkA := banEngine(t, banRules, o)
	b, clkB := banEngine(t, banRules, o)
	const ip = "192.0.2.1"
	for i := range 4 {
		at(a, clkA, ip, "/a", time.Duration(i)*time.Second)
	}
	waitFor(t, "the ban written", func() bool { return a.PolicyStats().StoreWrites >= 1 })
	readAfter(t, b)
	if o := at(b, clkB, ip, "/a", 4*time.Second); o.Action != httplimit.ActionBanned || o.Result.RetryAfter != 10*time.Minute-time.Second {
		t.Fatalf("on the other engine: %v %v", o.Action, o.Result.RetryAfter)
	}
	// A restarted node reads the bans in force.
	a.Close()
	a2, clkA2 := banEngine(t, banRules, o)
	waitFor(t, "a first read", func() bool { return a2.PolicyStats().StoreReads >= 1 })
	if o := at(a2, clkA2, ip, "/a", 5*time.Second); o.Action != httplimit.ActionBanned {
		t.Fatalf("after a restart: %v", o.Action)
	}
	// A lift on one is a lift on the other.
	if was, err := a2.LiftBan("a", "ip:"+ip); !was || err != nil {
		t.Fatalf("LiftBan: %v %v", was, err)
	}
	waitFor(t, "the lift written", func() bool { return a2.PolicyStats().StoreWrites >= 1 })
	readAfter(t, b)
	if o := at(b, clkB, ip, "/a", 6*time.Second); o.Action == httplimit.ActionBanned {
		t.Fatalf("after a lift on the other engine: %v", o.Action)
	}
	// A store that fails: requests are decided, errors counted.
	store.mu.Lock()
	store.fail = true
	store.mu.Unlock()
	if err := b.SetBan("a", "ip:192.0.2.2", time.Minute); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a store error", func() bool { return b.PolicyStats().StoreErrors >= 1 })
	if o := at(b, clkB, "192.0.2.2", "/a", 7*time.Second); o.Action != httplimit.ActionBanned {
		t.Fatalf("a local ban with the store down: %v", o.Action)
	}
}

// TestPoliciesAcrossReload checks that a reload keeping a rule's name
// keeps its bans and in-flight counts and applies its new limits, and
// that a rule that loses its ban stops banning.
func TestPoliciesAcrossReload(t *testing.T) {
	e, clk := banEngine(t, `{"rules": [{"name": "a", "path": "/a", "limit": 0, "window": "1m",
		"ban": {"after": 1, "within": "1m", "for": "1h"}, "concurrency": {"limit": 1}}]}`, httplimit.Options{})
	at(e, clk, "192.0.2.1", "/a", 0) // denied: banned for 1h
	held := decide(e, "192.0.2.2", "", "/a", 0, 1)
	if held.InFlight.Held() {
		t.Fatalf("a denied request kept its slot")
	}
	if err := e.Reload(mustParse(t, `{"rules": [{"name": "a", "path": "/a", "limit": 10, "window": "1m",
		"concurrency": {"limit": 2}}]}`)); err != nil {
		t.Fatal(err)
	}
	if o := at(e, clk, "192.0.2.1", "/a", time.Second); o.Action != httplimit.ActionBanned {
		t.Fatalf("after the reload: %v, want still banned", o.Action)
	}
	o1 := decide(e, "192.0.2.3", "", "/a", time.Second, 1)
	o2 := decide(e, "192.0.2.3", "", "/a", time.Second, 1)
	if !o1.InFlight.Held() || !o2.InFlight.Held() {
		t.Fatalf("the new limit of 2 in flight: %v %v", o1.Action, o2.Action)
	}
	e.Release(o1.InFlight)
	e.Release(o2.InFlight)
	// Without a ban, denials no longer ban.
	for range 20 {
		at(e, clk, "192.0.2.4", "/a", time.Second)
	}
	if st := e.PolicyStats(); st.BansStarted != 2 {
		t.Fatalf("stats %+v, want the one ban", st)
	}
}

// TestBanShareLiftPending checks that a lift the store has not taken yet
// is not undone by reads of the store that still hold the ban, and is
// written once the store takes it.
func TestBanShareLiftPending(t *testing.T) {
	store := newMemStore()
	e, clk := banEngine(t, banRules, httplimit.Options{BanStore: store, BanSyncInterval: 5 * time.Millisecond})
	if err := e.SetBan("a", "ip:192.0.2.1", time.Hour); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ban written", func() bool { return e.PolicyStats().StoreWrites >= 1 })
	store.mu.Lock()
	store.failLift = true
	store.mu.Unlock()
	if was, err := e.LiftBan("a", "ip:192.0.2.1"); !was || err != nil {
		t.Fatalf("LiftBan: %v %v", was, err)
	}
	waitFor(t, "a failed lift", func() bool { return e.PolicyStats().StoreErrors >= 1 })
	readAfter(t, e)
	if o := at(e, clk, "192.0.2.1", "/a", time.Second); o.Action == httplimit.ActionBanned {
		t.Fatal("a read of the store undid a pending lift")
	}
	store.mu.Lock()
	store.failLift = false
	store.mu.Unlock()
	waitFor(t, "the lift written", func() bool {
		store.mu.Lock()
		defer store.mu.Unlock()
		return len(store.bans) == 0
	})
}

// TestBanShareLiftDuringRead checks the interleaving of a lift with a
// read of the store that still holds the ban: LiftBan runs after the read
// returned and before it applies the ban (a hook at that point), so the
// read must not restore the ban, and the lift reaches the store.
func TestBanShareLiftDuringRead(t *testing.T) {
	store := newMemStore()
	e, clk := banEngine(t, banRules, httplimit.Options{BanStore: store, BanSyncInterval: 5 * time.Millisecond})
	if err := e.SetBan("a", "ip:192.0.2.1", time.Hour); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ban written", func() bool { return e.PolicyStats().StoreWrites >= 1 })
	lifted := make(chan bool, 1)
	var once sync.Once
	hook := func(string) {
		once.Do(func() {
			was, err := e.LiftBan("a", "ip:192.0.2.1")
			lifted <- was && err == nil
		})
	}
	e.pol.share.beforeApply.Store(&hook)
	select {
	case ok := <-lifted:
		if !ok {
			t.Fatal("LiftBan in the read found no ban in force")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for a read of the ban")
	}
	// The read that ran the hook has applied what it read; so has one
	// begun after it, with the lift written.
	readAfter(t, e)
	if o := at(e, clk, "192.0.2.1", "/a", time.Second); o.Action == httplimit.ActionBanned {
		t.Fatal("a read of the store restored a ban lifted while it was applied")
	}
	store.mu.Lock()
	n := len(store.bans)
	store.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d bans in the store after the lift", n)
	}
}
