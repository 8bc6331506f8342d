package mwengine

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/shardlimit/shardlimit/httplimit"
)

func newTestEngine(t *testing.T, o httplimit.Options) *Engine {
	t.Helper()
	e, err := New(o, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func mustParse(t testing.TB, js string) *httplimit.Rules {
	t.Helper()
	r, err := httplimit.ParseRules([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestMatch checks rule precedence: exact path over prefix, longer prefix
// over shorter, method-specific over any-method, tiers by identity then by
// network, and tier clients falling back to the default rules.
func TestMatch(t *testing.T) {
	e := newTestEngine(t, httplimit.Options{Rules: mustParse(t, `{
		"rules": [
			{"name": "all", "limit": 1, "window": "1m"},
			{"name": "api", "prefix": "/api", "limit": 1, "window": "1m"},
			{"name": "api-v2", "prefix": "/api/v2/", "limit": 1, "window": "1m"},
			{"name": "api-post", "prefix": "/api", "methods": ["POST"], "limit": 1, "window": "1m"},
			{"name": "login", "path": "/api/login", "limit": 1, "window": "1m"},
			{"name": "login-post", "path": "/api/login", "methods": ["post", "PUT"], "limit": 1, "window": "1m"}
		],
		"tiers": [
			{"name": "gold", "clients": ["g"], "networks": ["10.0.0.0/8", "2001:db8::/32"], "rules": [
				{"name": "gold-api", "prefix": "/api", "limit": 1, "window": "1m"}
			]}
		]}`)})
	set := e.set.Load()
	none := netip.Addr{}
	for _, tc := range []struct {
		id, client, method, path, want string
	}{
		{"", "", "GET", "/", "all"},
		{"", "", "GET", "/x/y", "all"},
		{"", "", "GET", "/api", "api"},
		{"", "", "GET", "/api/", "api"},
		{"", "", "GET", "/apix", "all"},
		{"", "", "GET", "/api/v2", "api"},
		{"", "", "GET", "/api/v2/", "api-v2"},
		{"", "", "GET", "/api/v2/x", "api-v2"},
		{"", "", "POST", "/api/x", "api-post"},
		{"", "", "POST", "/api/v2/x", "api-v2"},
		{"", "", "GET", "/api/login", "login"},
		{"", "", "POST", "/api/login", "login-post"},
		{"", "", "PUT", "/api/login", "login-post"},
		{"", "", "post", "/api/login", "login"},
		{"", "", "GET", "/api/login/x", "api"},
		{"g", "", "GET", "/api/login", "gold-api"},
		{"g", "", "GET", "/other", "all"},
		{"h", "", "GET", "/api", "api"},
		{"", "10.1.2.3", "GET", "/api", "gold-api"},
		{"", "::ffff:10.1.2.3", "GET", "/api", "gold-api"},
		{"", "2001:db8::7", "GET", "/api/v2/x", "gold-api"},
		{"", "192.0.2.1", "GET", "/api", "api"},
		{"h", "10.1.2.3", "GET", "/api", "gold-api"},
	} {
		client := none
		if tc.client != "" {
			client = netip.MustParseAddr(tc.client)
		}
		r := match(set, tc.id, client, tc.method, tc.path)
		rb := match(set, []byte(tc.id), client, []byte(tc.method), []byte(tc.path))
		got := "<none>"
		if r != nil {
			got = r.name
		}
		if got != tc.want || r != rb {
			t.Errorf("match(id %q, %s, %s %s) = %s, want %s", tc.id, tc.client, tc.method, tc.path, got, tc.want)
		}
	}
}

// TestMatchNoRule checks that a path no rule names matches none, nor does
// an exact rule's path with a trailing slash.
func TestMatchNoRule(t *testing.T) {
	none := netip.Addr{}
	e2 := newTestEngine(t, httplimit.Options{Rules: mustParse(t, `{"rules": [{"name": "foo", "path": "/foo", "limit": 1, "window": "1m"}]}`)})
	if r := match(e2.set.Load(), "", none, "GET", "/bar"); r != nil {
		t.Errorf("/bar matched %s without a rule", r.name)
	}
	if r := match(e2.set.Load(), "", none, "GET", "/foo/"); r != nil {
		t.Errorf("/foo/ matched the exact rule /foo")
	}
}

// TestMatchExactPaths checks exact-path matching on both sides of
// maxScanPaths (compared one by one, or through a map): every path finds
// its rule, the method-specific one first; paths of the same length that
// differ, and prefixes of a path, do not.
func TestMatchExactPaths(t *testing.T) {
	for _, n := range []int{1, maxScanPaths, maxScanPaths + 1, 3 * maxScanPaths} {
		var rules []string
		for i := range n {
			rules = append(rules,
				fmt.Sprintf(`{"name": "p%d", "path": "/p%02d", "limit": 1, "window": "1m"}`, i, i),
				fmt.Sprintf(`{"name": "p%d-post", "path": "/p%02d", "methods": ["POST"], "limit": 1, "window": "1m"}`, i, i))
		}
		rules = append(rules, `{"name": "rest", "prefix": "/", "limit": 1, "window": "1m"}`)
		e := newTestEngine(t, httplimit.Options{Rules: mustParse(t, `{"rules": [`+strings.Join(rules, ",")+`]}`)})
		set := e.set.Load()
		if scan := set.def.exact == nil; scan != (n <= maxScanPaths) {
			t.Errorf("%d paths: compared one by one %v", n, scan)
		}
		for i := range n {
			path := fmt.Sprintf("/p%02d", i)
			for method, want := range map[string]string{"GET": fmt.Sprintf("p%d", i), "POST": fmt.Sprintf("p%d-post", i)} {
				if r := match(set, "", netip.Addr{}, method, path); r == nil || r.name != want {
					t.Errorf("%d paths: %s %s matched %v, want %s", n, method, path, r, want)
				}
				if r := match(set, nil, netip.Addr{}, []byte(method), []byte(path)); r == nil || r.name != want {
					t.Errorf("%d paths: []byte %s %s matched %v, want %s", n, method, path, r, want)
				}
			}
		}
		for _, path := range []string{"/p99", "/p0", "/p000", "/", "/q00"} {
			if r := match(set, "", netip.Addr{}, "GET", path); r == nil || r.name != "rest" {
				t.Errorf("%d paths: %s matched %v, want rest", n, path, r)
			}
		}
	}
}

// match returns the enforced rule for a request with identity id, or nil.
func match[S byteseq](set *ruleSet, id S, client netip.Addr, method, path S) *rule {
	_, r, _ := matchRules(&Engine{}, set, &Request[S]{Identity: id, Client: client, Method: method, Path: path})
	return r
}
