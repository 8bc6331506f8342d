package mwengine

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// TestSetBanRefusesBansNoRequestMeets checks that SetBan refuses, rather
// than lists as in force, a ban no request would ever meet: on a shadow
// rule (which answers no request), of an empty identity, of a digest key
// that is not one, of an IPv4-mapped IPv6 network wider than a client's
// group (::ffff:10.0.0.0/104 is 10.0.0.0/8, not the address 10.0.0.0),
// of an identity no rule lists under UnknownIdentityAnonymous (keyed by
// address), or of any identity when the middleware reads none.
func TestSetBanRefusesBansNoRequestMeets(t *testing.T) {
	e, clk := banEngine(t, `{"rules": [{"name": "a", "path": "/a", "limit": 1, "window": "1m"},
		{"name": "s", "path": "/a", "limit": 1, "window": "1m", "shadow": true}],
		"overrides": [{"rule": "a", "id": "listed", "limit": 2}]}`,
		httplimit.Options{Keys: httplimit.KeyConfig{Header: "X-Id"}})
	for _, tc := range []struct{ rule, key string }{
		{"s", "ip:192.0.2.5"},
		{"a", "id:"},
		{"a", "id-sha256:zz"},
		{"a", "id-sha256:" + strings.Repeat("A", 64)},
		{"a", "ip:::ffff:10.0.0.0/104"},
		{"a", "ip:::ffff:0.0.0.0/96"},
		{"a", "id:unlisted"},
	} {
		if err := e.SetBan(tc.rule, tc.key, time.Minute); !errors.Is(err, shardlimit.ErrInvalidConfig) {
			t.Errorf("SetBan(%q, %q): %v, want ErrInvalidConfig", tc.rule, tc.key, err)
		}
	}
	if bans := e.Bans(); len(bans) != 0 {
		t.Fatalf("Bans() = %+v after refused SetBans", bans)
	}
	// LiftBan lifts what a reload may have left unmet.
	for _, tc := range []struct{ rule, key string }{{"s", "ip:192.0.2.5"}, {"a", "id:unlisted"}} {
		if was, err := e.LiftBan(tc.rule, tc.key); was || err != nil {
			t.Errorf("LiftBan(%q, %q): %v %v, want false <nil>", tc.rule, tc.key, was, err)
		}
	}
	for _, key := range []string{"ip:::ffff:10.0.0.1/128", "id-sha256:" + strings.Repeat("0a", 32), "shared", "id:listed"} {
		if err := e.SetBan("a", key, time.Minute); err != nil {
			t.Errorf("SetBan(a, %q): %v", key, err)
		}
	}
	if o := at(e, clk, "10.0.0.1", "/a", time.Second); o.Action != httplimit.ActionBanned {
		t.Errorf("10.0.0.1 after a ban of ::ffff:10.0.0.1/128: %v", o.Action)
	}
	if o := at(e, clk, "10.0.0.0", "/a", time.Second); o.Action != httplimit.ActionAllow {
		t.Errorf("10.0.0.0: %v", o.Action)
	}
	noID, _ := banEngine(t, `{"rules": [{"name": "a", "path": "/a", "limit": 1, "window": "1m"}]}`, httplimit.Options{})
	for _, key := range []string{"id:client-1", "id-sha256:" + strings.Repeat("0a", 32)} {
		if err := noID.SetBan("a", key, time.Minute); !errors.Is(err, shardlimit.ErrInvalidConfig) {
			t.Errorf("SetBan(a, %q) with no identity read: %v, want ErrInvalidConfig", key, err)
		}
	}
}
