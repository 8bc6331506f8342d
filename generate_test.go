package shardlimit

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
)

// TestDecisionsGenIsFresh fails when decisions_gen.go is not what its
// generator writes: run go generate after changing the template.
func TestDecisionsGenIsFresh(t *testing.T) {
	want, err := exec.Command("go", "run", "./internal/gen/decisions", "-o", "-").Output()
	if err != nil {
		t.Fatalf("running the generator: %v", err)
	}
	got, err := os.ReadFile("decisions_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("decisions_gen.go is stale: run go generate in the repository's root")
	}
}
