package mwengine

import (
	"net/netip"
	"strconv"
	"testing"

	"github.com/shardlimit/shardlimit/httplimit"
)

// BenchmarkPolicies measures the allowed path of a rule without policies,
// with a ban, and with a ban and a concurrency limit (slot taken and
// given back), over 1024 clients from parallel goroutines.
func BenchmarkPolicies(b *testing.B) {
	for _, bc := range []struct{ name, extra string }{
		{"plain", ``},
		{"ban", `, "ban": {"after": 3, "within": "1m", "for": "1m"}`},
		{"ban+concurrency", `, "ban": {"after": 3, "within": "1m", "for": "1m"}, "concurrency": {"limit": 1000}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			rules, err := httplimit.ParseRules([]byte(`{"rules": [{"name": "a", "prefix": "/", "limit": 1000000000, "window": "1h"` + bc.extra + `}]}`))
			if err != nil {
				b.Fatal(err)
			}
			e, err := New(httplimit.Options{Rules: rules}, false)
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			clients := make([]netip.Addr, 1024)
			for i := range clients {
				clients[i] = netip.MustParseAddr("10.1." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256))
			}
			now := e.Clock().Now()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				q := Request[[]byte]{Method: []byte("GET"), Path: []byte("/x"), Now: now, Cost: 1}
				var out Outcome
				i := 0
				for pb.Next() {
					q.Client = clients[i&1023]
					i++
					sc := e.GetScratch()
					Decide(e, sc, &q, &out)
					e.PutScratch(sc)
					e.Release(out.InFlight)
				}
			})
		})
	}
}
