package shardlimit

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
)

// TestDecisionsGenIsFresh fails when decisions_gen.go, here, in
// internal/core or in sync, is not what its generator writes: run go
// generate ./... after changing a template.
func TestDecisionsGenIsFresh(t *testing.T) {
	for pkg, file := range map[string]string{
		"shardlimit": "decisions_gen.go",
		"core":       "internal/core/decisions_gen.go",
		"sync":       "sync/decisions_gen.go",
	} {
		want, err := exec.Command("go", "run", "./internal/gen/decisions", "-pkg", pkg, "-o", "-").Output()
		if err != nil {
			t.Fatalf("running the generator: %v", err)
		}
		got, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s is stale: run go generate ./... in the repository's root", file)
		}
	}
}
