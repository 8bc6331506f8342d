package mwengine

import (
	"net/netip"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit/httplimit"
)

// BenchmarkBanned measures a banned request (the ban looked up and the
// limiter peeked for the Retry-After) against its peer, a request the
// limiter denies on a rule without a ban, for one known client.
func BenchmarkBanned(b *testing.B) {
	e, err := New(httplimit.Options{Rules: mustParse(b, `{"rules": [
		{"name": "a", "path": "/a", "limit": 1, "window": "1h", "ban": {"after": 1, "within": "1m", "for": "1m"}},
		{"name": "b", "path": "/b", "limit": 1, "window": "1h"}]}`)}, false)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	now := e.Clock().Now()
	for _, bc := range []struct {
		name, path string
		want       httplimit.Action
	}{
		{"banned", "/a", httplimit.ActionBanned},
		{"denied", "/b", httplimit.ActionDeny},
	} {
		b.Run(bc.name, func(b *testing.B) {
			q := Request[[]byte]{Method: []byte("GET"), Path: []byte(bc.path), Client: netip.MustParseAddr("192.0.2.1"), Now: now, Cost: 1}
			decideOne(e, &q)
			decideOne(e, &q) // denied: on /a, banned for 1m
			q.Now = now.Add(time.Second)
			b.ReportAllocs()
			for b.Loop() {
				if a := decideOne(e, &q); a != bc.want {
					b.Fatalf("action %v", a)
				}
			}
		})
	}
}
