package httplimit

import (
	"errors"
	"strings"
	"testing"

	"github.com/shardlimit/shardlimit"
)

// TestKeyNamespace: a fixed-length namespace that depends on the name
// alone.
func TestKeyNamespace(t *testing.T) {
	for _, name := range []string{"a", "b", "search", strings.Repeat("x", 1000), "", "naïve {rule}"} {
		ns := KeyNamespace(name)
		if len(ns) != KeyNamespaceLen || ns[len(ns)-1] != ':' || strings.Trim(ns[:len(ns)-1], "0123456789abcdef") != "" {
			t.Errorf("KeyNamespace(%q) = %q, want %d bytes: hex digits and a colon", name, ns, KeyNamespaceLen)
		}
		if KeyNamespace(name) != ns {
			t.Errorf("KeyNamespace(%q) changes", name)
		}
	}
	// The first 32 bits of SHA-256("a"): ca978112ca1bbdca...
	if got := KeyNamespace("a"); got != "ca978112:" {
		t.Errorf(`KeyNamespace("a") = %q, want "ca978112:"`, got)
	}
	if KeyNamespace("a") == KeyNamespace("b") {
		t.Error(`rules "a" and "b" have one namespace`)
	}
}

// TestKeyNamespaceCollision: two rules whose names have one namespace are
// refused, in one tier or two.
func TestKeyNamespaceCollision(t *testing.T) {
	// Found by search: SHA-256 of both begins e9ed68ac.
	const n1, n2 = "rule-59842", "rule-81239"
	if KeyNamespace(n1) != KeyNamespace(n2) {
		t.Fatalf("%q and %q no longer collide", n1, n2)
	}
	for _, js := range []string{
		`{"rules": [{"name": "` + n1 + `", "path": "/a", "limit": 1, "window": "1m"}, {"name": "` + n2 + `", "path": "/b", "limit": 1, "window": "1m"}]}`,
		`{"rules": [{"name": "` + n1 + `", "path": "/a", "limit": 1, "window": "1m"}],
		  "tiers": [{"name": "gold", "clients": ["c"], "rules": [{"name": "` + n2 + `", "path": "/a", "limit": 1, "window": "1m"}]}]}`,
	} {
		_, err := ParseRules([]byte(js))
		if !errors.Is(err, shardlimit.ErrInvalidConfig) || !strings.Contains(err.Error(), "key namespace") {
			t.Errorf("colliding names: %v, want a key namespace error", err)
		}
	}
}
