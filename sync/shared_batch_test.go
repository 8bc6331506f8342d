package sync

import (
	"fmt"
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
	for _, cmd := range m.Stop() {
		if name := strings.ToUpper(cmd[0]); name == "EVALSHA" || name == "EVAL" {
			calls++
			n := (len(cmd) - 3 - len(callKeys(cmd))) / 6
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
