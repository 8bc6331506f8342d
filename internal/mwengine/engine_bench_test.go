package mwengine

import (
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// BenchmarkDecide is one decision for a known client on a matched rule,
// the engine's share of the allowed path, from one goroutine (on a rule of
// one limit and of two; string and []byte requests) and from GOMAXPROCS
// goroutines (each its own client) taking the gate's read locks side by
// side.
func BenchmarkDecide(b *testing.B) {
	rules, err := httplimit.ParseRules([]byte(`{"rules": [
		{"name": "open", "prefix": "/", "limit": 1000000000, "window": "1h"},
		{"name": "two", "path": "/two", "limits": [{"limit": 1000000000, "window": "1m"}, {"limit": 1000000000, "window": "1h"}]}
	]}`))
	if err != nil {
		b.Fatal(err)
	}
	e, err := New(httplimit.Options{Rules: rules}, false)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	decide := func(q *Request[string]) {
		sc := e.GetScratch()
		var o Outcome
		Decide(e, sc, q, &o)
		if o.Action != httplimit.ActionAllow {
			b.Fatalf("action %v", o.Action)
		}
		e.PutScratch(sc)
	}
	// The same rules on limiters a NewLimiter builds (shardlimit's own):
	// each key passed to them starts with the rule's namespace.
	ens, err := New(httplimit.Options{Rules: rules, NewLimiter: func(_ string, cfg shardlimit.Config) (shardlimit.Limiter, error) {
		return shardlimit.New(cfg)
	}}, false)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ens.Close() })
	now := e.Clock().Now()
	b.Run("serial", func(b *testing.B) {
		q := Request[string]{Method: "GET", Path: "/x", Client: netip.MustParseAddr("192.0.2.1"), Now: now, Cost: 1}
		b.ReportAllocs()
		for b.Loop() {
			decide(&q)
		}
	})
	b.Run("namespaced", func(b *testing.B) {
		q := Request[string]{Method: "GET", Path: "/x", Client: netip.MustParseAddr("192.0.2.1"), Now: now, Cost: 1}
		b.ReportAllocs()
		for b.Loop() {
			sc := ens.GetScratch()
			var o Outcome
			Decide(ens, sc, &q, &o)
			if o.Action != httplimit.ActionAllow {
				b.Fatalf("action %v", o.Action)
			}
			ens.PutScratch(sc)
		}
	})
	b.Run("two-limits", func(b *testing.B) {
		q := Request[string]{Method: "GET", Path: "/two", Client: netip.MustParseAddr("192.0.2.1"), Now: now, Cost: 1}
		b.ReportAllocs()
		for b.Loop() {
			decide(&q)
		}
	})
	// The []byte form fasthttpmw decides with, for an IPv6 client (its
	// key built from a /64 prefix).
	b.Run("bytes-ipv6", func(b *testing.B) {
		q := Request[[]byte]{Method: []byte("GET"), Path: []byte("/x"), Client: netip.MustParseAddr("2001:db8::1"), Now: now, Cost: 1}
		b.ReportAllocs()
		for b.Loop() {
			sc := e.GetScratch()
			var o Outcome
			Decide(e, sc, &q, &o)
			if o.Action != httplimit.ActionAllow {
				b.Fatalf("action %v", o.Action)
			}
			e.PutScratch(sc)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		var n atomic.Uint32
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := n.Add(1)
			q := Request[string]{Method: "GET", Path: "/x", Client: netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), Now: now, Cost: 1}
			for pb.Next() {
				decide(&q)
			}
		})
	})
}
