package httpmw

import (
	"strings"
	"testing"
)

var pathSamples = []string{
	"/", "//", "/a", "/a/", "/a//b", "/.", "/..", "/./", "/../", "/a/.", "/a/..", "/a/./b", "/a/../b",
	"/.a", "/..a", "/a.", "/a..", "/...", "/a/.../b", "/.well-known/x", "/a/b/c.d", "a", "a/b", ".", "./a",
	"/a/b//", "/a/b/.", "/a/b/..", "/%2e%2e/x",
}

// TestIsClean checks isClean against the definition it replaces.
func TestIsClean(t *testing.T) {
	for _, p := range pathSamples {
		checkIsClean(t, p)
	}
}

// FuzzIsClean is the same comparison on generated paths.
func FuzzIsClean(f *testing.F) {
	for _, p := range pathSamples {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if p != "" {
			checkIsClean(t, p)
		}
	})
}

func checkIsClean(t *testing.T, p string) {
	t.Helper()
	want := p[0] == '/' && !strings.Contains(p, "//") && !strings.Contains(p, "/./") &&
		!strings.Contains(p, "/../") && !strings.HasSuffix(p, "/.") && !strings.HasSuffix(p, "/..")
	if got := isClean(p); got != want {
		t.Fatalf("isClean(%q) = %v, want %v", p, got, want)
	}
	if want && cleanPath(p) != p {
		t.Fatalf("cleanPath(%q) = %q for a clean path", p, cleanPath(p))
	}
}
