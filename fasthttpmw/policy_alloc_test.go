//go:build !race

package fasthttpmw

import (
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwtest"
)

// TestPolicyAllocs checks that with 10,000 networks on the exempt and deny
// lists and a shadow rule beside the enforced one, the allowed path still
// allocates nothing (IPv4 and IPv6 peers, every field on), nor do an
// exempt request and a denied one (403).
func TestPolicyAllocs(t *testing.T) {
	mw, err := New(Config{Options: httplimit.Options{Rules: mwtest.ListRules(t),
		Keys: httplimit.KeyConfig{Header: "X-Client-ID"}, Headers: httplimit.HeaderConfig{IETF: true, Verbose: true}}})
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Close()
	h := mw.Wrap(func(*fasthttp.RequestCtx) {})
	for _, tc := range []struct {
		ip     string
		hdr    []string
		status int
	}{
		{"192.0.2.1", nil, 200},
		{"2001:db8:ffff::1", nil, 200},
		{"10.3.7.9", nil, 200},
		{"2001:db8:7::1", nil, 200},
		{"11.3.7.9", nil, 403},
		{"192.0.2.1", []string{"X-Client-ID", "evil"}, 403},
	} {
		ctx := newCtx(t, tc.ip, "/open", tc.hdr...)
		if n := allocs(h, ctx); n != 0 {
			t.Errorf("%s %v: %v allocs per request, want 0", tc.ip, tc.hdr, n)
		}
		if ctx.Response.StatusCode() != tc.status {
			t.Errorf("%s %v: status %d, want %d", tc.ip, tc.hdr, ctx.Response.StatusCode(), tc.status)
		}
	}
	if st := mw.Stats(); st.Allowed == 0 || st.ShadowAllowed != st.Allowed || st.Exempt == 0 || st.DenyListed == 0 {
		t.Errorf("Stats %+v: want allowed requests counted by both rules, exempt and denied ones by the lists", st)
	}
}
