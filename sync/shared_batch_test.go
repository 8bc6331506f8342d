package sync

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// TestSharedFlushBatchesKeys: on one server, the hub's flush of 300 keys
// of two limiters on one client (two prefixes, two node ids) goes in
// script calls of at most MaxScriptItems items: ceil(600/MaxScriptItems)
// = 5 calls if the decisions fall in one tick, a few more if they
// straddle ticks on a loaded machine, never one per item; every counter
// holds exactly the units admitted; a write sent again with the same Seq
// (the go-redis re-send Seq guards against) adds nothing.
func TestSharedFlushBatchesKeys(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newClient(t, srv.Addr)
	clock := shardlimit.NewManualClock(at(time.Second))
	cfg := SharedConfig{
		Config:        shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 100, Window: time.Minute, Clock: clock},
		FlushInterval: 200 * time.Millisecond, EvictionCheck: -1,
	}
	a := newShared(t, c, cfg)
	cfg.Prefix = redistest.Prefix(t) + "b:"
	b := newShared(t, c, cfg)
	keys := make([]string, 300)
	for i := range keys {
		keys[i] = fmt.Sprint("user:", i)
	}
	now := clock.Now()
	for i, k := range keys {
		a.AllowN(k, now, 1+i%3)
		b.AllowN(k, now, 1)
	}
	sent := func(wantA, wantB uint64) {
		eventually(t, 10*time.Second, func() string {
			for i, s := range []*Shared{a, b} {
				want := []uint64{wantA, wantB}[i]
				if st := s.SharedStats(); st.SentUnits != want || st.ItemErrors != 0 {
					return fmt.Sprintf("stats %+v, want %d units sent", st, want)
				}
			}
			return ""
		})
	}
	sent(600, 300) // and the script loaded
	m := redistest.StartMonitor(t, srv.Addr)
	for i, k := range keys {
		a.AllowN(k, now, 1)
		b.AllowN(k, now, 1+i%2)
	}
	sent(900, 750)
	var calls, items int
	cmds := m.Sync(t) // every command executed so far, the last flush's too
	m.Stop()
	for _, cmd := range cmds {
		if name := strings.ToUpper(cmd[0]); name == "EVALSHA" || name == "EVAL" {
			calls++
			nkeys := scriptItems(cmd[3+len(callKeys(cmd)):])
			n := len(nkeys)
			if n > MaxScriptItems {
				t.Errorf("a call of %d items", n)
			}
			items += n
		}
	}
	t.Logf("%d items in %d script calls", items, calls)
	if calls > 8 || items != 600 {
		t.Errorf("%d script calls of %d items, want 5 (at most 8) of 600", calls, items)
	}
	id := now.UnixNano() / int64(time.Minute)
	for i, v := range counters(t, c, a, keys, id) {
		if want := int64(2 + i%3); v != want {
			t.Errorf("a's counter of %s = %d, want %d", keys[i], v, want)
		}
	}
	for i, v := range counters(t, c, b, keys, id) {
		if want := int64(2 + i%2); v != want {
			t.Errorf("b's counter of %s = %d, want %d", keys[i], v, want)
		}
	}
	// The same write again (a re-send by the client): nothing added.
	it := Item{Key: keys[0], ID: id, Delta: 5, Node: a.node, Floor: 2, Seq: a.seq, TTL: time.Minute}
	out := a.backend.Add(ctxT(t, 10*time.Second), []Item{it, {Key: keys[1], ID: id, Node: a.node, TTL: time.Minute}}, nil)
	if out[0].Outcome != Applied || out[0].Total != 2 || out[1].Outcome != Applied || out[1].Total != 3 {
		t.Errorf("a re-sent write: %+v", out)
	}
}

// TestPlanCalls: the script calls of a batch: any items together on one
// server, items of one hash slot on a Cluster, of one limiter key on
// another client; at most per items and MaxScriptKeys keys a call (an item
// of more keys alone); the items of a group in their order.
func TestPlanCalls(t *testing.T) {
	// user:0 .. user:3 are in four slots; slotPartners gives a key in the
	// slot of user:0.
	partner := slotPartners([]string{"user:0"})[0]
	items := []Item{
		{Key: "user:0", ID: 1}, {Key: "user:1", ID: 1}, {Key: partner, ID: 1},
		{Key: "user:0", ID: 2, Span: 2}, {Key: "user:2", ID: 1}, {Key: "user:3", ID: 1},
	}
	var batch []pending
	for _, it := range items {
		batch = append(batch, pending{tag: tagged("p:", it.Key), nkeys: it.Span + 1})
	}
	keysOf := func(c scriptCall) []string {
		var out []string
		for _, i := range c.idx {
			out = append(out, items[i].Key)
		}
		return out
	}
	plan := func(route keyRoute, per int) [][]string {
		var out [][]string
		for _, c := range planCalls(batch, route, per) {
			n := 0
			for _, i := range c.idx {
				n += batch[i].nkeys
			}
			if cap(c.keys) != n || cap(c.args) != 4+3*len(c.idx) {
				t.Errorf("call of %d items: room for %d keys, %d args", len(c.idx), cap(c.keys), cap(c.args))
			}
			out = append(out, keysOf(c))
		}
		return out
	}
	check := func(name string, got [][]string, want [][]string) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: calls %q, want %q", name, got, want)
		}
	}
	check("one server", plan(routeAny, MaxScriptItems),
		[][]string{{"user:0", "user:1", partner, "user:0", "user:2", "user:3"}})
	check("one server, 4 a call", plan(routeAny, 4),
		[][]string{{"user:0", "user:1", partner, "user:0"}, {"user:2", "user:3"}})
	check("cluster", plan(routeSlot, MaxScriptItems),
		[][]string{{"user:0", partner, "user:0"}, {"user:1"}, {"user:2"}, {"user:3"}})
	check("ring", plan(routeTag, MaxScriptItems),
		[][]string{{"user:0", "user:0"}, {"user:1"}, {partner}, {"user:2"}, {"user:3"}})

	// MaxScriptKeys: two items of 600 keys would pass it, so each goes in
	// a call of its own; an item of more than MaxScriptKeys goes alone.
	items = []Item{{Key: "a", ID: 1, Span: 599}, {Key: "b", ID: 1, Span: 599}, {Key: "c", ID: 1, Span: 2000}, {Key: "d", ID: 1}}
	batch = batch[:0]
	for _, it := range items {
		batch = append(batch, pending{tag: tagged("p:", it.Key), nkeys: it.Span + 1})
	}
	check("keys", plan(routeAny, MaxScriptItems), [][]string{{"a"}, {"b"}, {"c"}, {"d"}})
}
