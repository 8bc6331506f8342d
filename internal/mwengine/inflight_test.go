package mwengine

import (
	"net/netip"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit/httplimit"
)

// TestSlotHeldTakesNoSlot: a request that holds its slot already
// (Request.SlotHeld, a stream's message) is decided by the limit alone,
// neither refused by the rule's Concurrency nor taking a slot; the
// others are refused once the slots are taken.
func TestSlotHeldTakesNoSlot(t *testing.T) {
	e, err := New(httplimit.Options{Rules: &httplimit.Rules{Rules: []httplimit.Rule{{
		Name: "a", Prefix: "/", Limit: 100, Window: time.Minute,
		Concurrency: &httplimit.Concurrency{Limit: 1},
	}}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	q := Request[string]{Method: "POST", Path: "/x", Cost: 1, Client: netip.MustParseAddr("192.0.2.1"), Now: e.Clock().Now()}
	sc := e.GetScratch()
	var held Outcome
	Decide(e, sc, &q, &held)
	if held.Action != httplimit.ActionAllow || !held.InFlight.Held() {
		t.Fatalf("first request: %v, slot held %v; want allowed with the slot", held.Action, held.InFlight.Held())
	}
	msg := q
	msg.SlotHeld = true
	for i := range 3 {
		var o Outcome
		Decide(e, sc, &msg, &o)
		if o.Action != httplimit.ActionAllow || o.InFlight.Held() {
			t.Errorf("message %d: %v, slot held %v; want allowed without a slot", i, o.Action, o.InFlight.Held())
		}
	}
	if n := e.InFlightCount("a", "ip:192.0.2.1"); n != 1 {
		t.Errorf("in flight %d, want 1", n)
	}
	if a := decideOne(e, &q); a != httplimit.ActionTooManyInFlight {
		t.Errorf("a second request: %v, want ActionTooManyInFlight", a)
	}
	e.Release(held.InFlight)
	e.PutScratch(sc)
	if n := e.InFlightCount("a", "ip:192.0.2.1"); n != 0 {
		t.Errorf("in flight after Release %d, want 0", n)
	}
}
