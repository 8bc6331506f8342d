package main

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// TestResolveTarget checks which URLs are accepted, where they are
// dialled, and that hosts other than loopback are refused.
func TestResolveTarget(t *testing.T) {
	ctx := context.Background()
	good := []struct {
		url, base, addr string
		remote          bool
	}{
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080", "127.0.0.1:8080", false},
		{"http://127.0.0.1:8080/", "http://127.0.0.1:8080", "127.0.0.1:8080", false},
		{"http://127.9.9.9", "http://127.9.9.9", "127.9.9.9:80", false},
		{"https://[::1]:8443", "https://[::1]:8443", "[::1]:8443", false},
		{"http://[::ffff:127.0.0.1]:1", "http://[::ffff:127.0.0.1]:1", "[::ffff:127.0.0.1]:1", false},
		{"http://example.com:8080", "http://example.com:8080", "example.com:8080", true},
		{"http://192.0.2.1", "http://192.0.2.1", "192.0.2.1:80", true},
	}
	for _, c := range good {
		got, err := resolveTarget(ctx, c.url, c.remote)
		if err != nil {
			t.Errorf("resolveTarget(%q, %v): %v", c.url, c.remote, err)
			continue
		}
		if got.base != c.base || got.addr != c.addr {
			t.Errorf("resolveTarget(%q, %v) = %+v, want base %s addr %s", c.url, c.remote, got, c.base, c.addr)
		}
	}

	// localhost is resolved once and pinned to a loopback address.
	got, err := resolveTarget(ctx, "http://localhost:8080", false)
	if err != nil {
		t.Fatal(err)
	}
	if ap, err := netip.ParseAddrPort(got.addr); err != nil || !ap.Addr().IsLoopback() || ap.Port() != 8080 || got.base != "http://localhost:8080" {
		t.Errorf("localhost: %+v, want a loopback address pinned, port 8080", got)
	}

	bad := []struct {
		url    string
		want   string
		remote bool // the error wraps errRemote
	}{
		{"http://192.0.2.1:8080", "-allow-remote", true},
		{"http://10.0.0.1", "-allow-remote", true},
		{"http://[2001:db8::1]:80", "-allow-remote", true},
		{"http://0.0.0.0:8080", "-allow-remote", true},
		{"http://example.com", `"example.com" is not localhost`, true},
		{"http://127.0.0.1.nip.io", "is not localhost", true},
		{"ftp://127.0.0.1", "scheme must be http or https", false},
		{"127.0.0.1:8080", "want scheme://host[:port]", false},
		{"http://", "no host", false},
		{"http://127.0.0.1:8080/foo", "routes come from -clients", false},
		{"http://127.0.0.1:8080?x=1", "routes come from -clients", false},
		{"http://u:p@127.0.0.1", "user information", false},
		{"http://127.0.0.1:8080/%zz", "invalid URL escape", false},
	}
	for _, c := range bad {
		_, err := resolveTarget(ctx, c.url, false)
		if err == nil {
			t.Errorf("resolveTarget(%q): no error, want %q", c.url, c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || errors.Is(err, errRemote) != c.remote {
			t.Errorf("resolveTarget(%q) = %q, want %q (errRemote: %v)", c.url, err, c.want, c.remote)
		}
	}
}

// TestRunRefusesRemote checks that Run refuses a non-loopback URL before
// sending anything (192.0.2.1 is TEST-NET-1: nothing would answer anyway).
func TestRunRefusesRemote(t *testing.T) {
	cfg := testConfig("http://192.0.2.1:8080", "a:/foo=1/s", 0)
	cfg.Duration = 1e9
	r, err := Run(context.Background(), cfg)
	if !errors.Is(err, errRemote) || r != nil {
		t.Fatalf("Run against 192.0.2.1 = %v, %v; want errRemote", r, err)
	}
}
