package netprefix

import "testing"

func TestParse(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"10.0.0.0/8", "10.0.0.0/8"},
		{" 10.1.2.3/8 ", "10.0.0.0/8"},
		{"192.0.2.7", "192.0.2.7/32"},
		{"2001:db8::1", "2001:db8::1/128"},
		{"fe80::1%eth0", "fe80::1/128"},
		{"::ffff:10.0.0.0/104", "10.0.0.0/8"},
		{"::ffff:192.0.2.7", "192.0.2.7/32"},
		{"2001:db8:1::/48", "2001:db8:1::/48"},
	} {
		p, err := Parse(tc.in)
		if err != nil || p.String() != tc.want {
			t.Errorf("Parse(%q) = %v, %v; want %s", tc.in, p, err, tc.want)
		}
	}
	for _, in := range []string{"", "nope", "10.0.0.0/33", "::ffff:0:0/80", "1.2.3"} {
		if p, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", in, p)
		}
	}
}
