package mwengine

import (
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit/httplimit"
)

// BenchmarkPolicies measures the allowed path of a rule without policies,
// with a ban (no ban in force anywhere: nothing looked up), with a ban
// looked up (another client is banned), and with that and a concurrency
// limit (slot taken and given back), over 1024 clients from parallel
// goroutines.
func BenchmarkPolicies(b *testing.B) {
	ban := `, "ban": {"after": 3, "within": "1m", "for": "1m"}`
	for _, bc := range []struct {
		name, extra string
		banned      bool
	}{
		{"plain", ``, false},
		{"ban", ban, false},
		{"ban-lookup", ban, true},
		{"ban-lookup+concurrency", ban + `, "concurrency": {"limit": 1000}`, true},
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
			if bc.banned {
				if err := e.SetBan("a", "ip:192.0.2.1", time.Hour); err != nil {
					b.Fatal(err)
				}
			}
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
