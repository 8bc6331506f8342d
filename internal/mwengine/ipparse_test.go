package mwengine

import (
	"net/netip"
	"strings"
	"testing"
)

var addrSamples = []string{
	"0.0.0.0", "192.0.2.1", "255.255.255.255", "1.2.3.4", "01.2.3.4", "1.2.3.04", "1.2.3", "1.2.3.4.5",
	"256.1.1.1", "1..2.3", ".1.2.3", "1.2.3.", "1.2.3.4 ", "", "a.b.c.d", "1.2.3.-4", "1.2.3.1000",
	"::", "::1", "1::", "2001:db8::1", "2001:DB8:ABCD:13:0:0:0:2", "2001:db8:abcd:12:ffff:ffff:ffff:fffe",
	"::ffff:192.0.2.1", "::ffff:c000:201", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8:9", "1:2:3:4:5:6:7::",
	"::1:2:3:4:5:6:7", "1:2:3:4:5:6::7:8", "1:2:3:4:5:6:7:8::", "1::2::3", ":1::", "1:::2", "::1:",
	"1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:1.2.3.4", "::1.2.3.4", "1::1.2.3.4", "1:2:3:4:5:6:7:1.2.3.4",
	"12345::", "0001:0002::", "fe80::1%eth0", "fe80::1%", "fe80::1%25", "::g", "[::1]", "1.2.3.4:80",
	"1:2:3:4:5:6:7:8:", "::ffff:1.2.3", "::ffff:1.2.3.4.5", "0::0", ":",
}

// TestParseAddrMatchesNetip checks the allocation-free parser against
// netip.ParseAddr (zones dropped) on hand-picked inputs.
func TestParseAddrMatchesNetip(t *testing.T) {
	for _, s := range addrSamples {
		checkParse(t, s)
	}
}

// FuzzParseAddr is the same comparison on generated inputs.
func FuzzParseAddr(f *testing.F) {
	for _, s := range addrSamples {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkParse(t, s) })
}

func checkParse(t *testing.T, s string) {
	t.Helper()
	want, err := netip.ParseAddr(s)
	got, ok := parseAddr(s)
	gotB, okB := parseAddr([]byte(s))
	if ok != okB || got != gotB {
		t.Fatalf("parseAddr(%q): string form %v %v, []byte form %v %v", s, got, ok, gotB, okB)
	}
	if ok != (err == nil) {
		t.Fatalf("parseAddr(%q) ok=%v, netip.ParseAddr error %v", s, ok, err)
	}
	if ok && got != want.WithZone("") {
		t.Fatalf("parseAddr(%q) = %v, netip says %v", s, got, want)
	}
}

func TestParseHop(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // "" = invalid
	}{
		{" 192.0.2.1 ", "192.0.2.1"},
		{"192.0.2.1:8080", "192.0.2.1"},
		{"[2001:db8::1]:443", "2001:db8::1"},
		{"[2001:db8::1]", "2001:db8::1"},
		{"2001:db8::1", "2001:db8::1"},
		{"::ffff:192.0.2.9", "192.0.2.9"},
		{"[::ffff:192.0.2.9]:1", "192.0.2.9"},
		{"\t10.0.0.1\t", "10.0.0.1"},
		{"192.0.2.1:", ""},
		{"192.0.2.1:123456", ""},
		{"[2001:db8::1", ""},
		{"[2001:db8::1]x", ""},
		{"[2001:db8::1]:", ""},
		{"unknown", ""},
		{"_hidden", ""},
		{"", ""},
		{strings.Repeat("1", 100), ""},
	} {
		a, ok := parseHop(tc.in)
		if ok != (tc.want != "") || ok && a.String() != tc.want {
			t.Errorf("parseHop(%q) = %v, %v; want %q", tc.in, a, ok, tc.want)
		}
	}
}

var remoteAddrSamples = []string{
	"192.0.2.1:40000", "192.0.2.1:0", "192.0.2.1:65535", "192.0.2.1:65536", "192.0.2.1:000080",
	"192.0.2.1:", "192.0.2.1:+80", "192.0.2.1:0x50", "192.0.2.1:8_0", "192.0.2.1", "192.0.2.1 ",
	"[2001:db8::1]:443", "[2001:db8::1]", "[2001:db8::1]:", "2001:db8::1", "2001:db8::1:80",
	"[fe80::1%eth0]:80", "[fe80::1%]:80", "fe80::1%eth0", "[::ffff:192.0.2.9]:1", "::ffff:192.0.2.9",
	"::ffff:192.0.2.9:1", "[192.0.2.1]:80", "[[::1]]:80", "[::1]]:80", "[::1:80", "::1]:80", "[]:80",
	"[:80", ":80", ":", "", "@", "unknown:80", "1.2.3.4:5:6", "[::1]:80:90", "01.2.3.4:80",
}

// TestParseRemoteAddr checks ParseRemoteAddr against what httpmw did
// before it: netip.ParseAddrPort, then netip.ParseAddr (unmapped, zone
// dropped).
func TestParseRemoteAddr(t *testing.T) {
	for _, s := range remoteAddrSamples {
		checkRemoteAddr(t, s)
	}
}

// FuzzParseRemoteAddr is the same comparison on generated inputs.
func FuzzParseRemoteAddr(f *testing.F) {
	for _, s := range append(remoteAddrSamples, addrSamples...) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkRemoteAddr(t, s) })
}

func checkRemoteAddr(t *testing.T, s string) {
	t.Helper()
	var want netip.Addr
	if ap, err := netip.ParseAddrPort(s); err == nil {
		want = ap.Addr().Unmap().WithZone("")
	} else if a, err := netip.ParseAddr(s); err == nil {
		want = a.Unmap().WithZone("")
	}
	if got := ParseRemoteAddr(s); got != want {
		t.Fatalf("ParseRemoteAddr(%q) = %v, netip says %v", s, got, want)
	}
}
