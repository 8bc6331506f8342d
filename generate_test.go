package shardlimit

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
)

// TestGeneratedFilesAreFresh fails when a generated file (decisions_gen.go
// here, in internal/core or in sync; config_gen.go here or in sync) is not
// what its generator writes: run go generate ./... after changing a
// template.
func TestGeneratedFilesAreFresh(t *testing.T) {
	for _, g := range []struct{ gen, pkg, file string }{
		{"decisions", "shardlimit", "decisions_gen.go"},
		{"decisions", "core", "internal/core/decisions_gen.go"},
		{"decisions", "sync", "sync/decisions_gen.go"},
		{"configconv", "shardlimit", "config_gen.go"},
		{"configconv", "sync", "sync/config_gen.go"},
	} {
		pkg, file := g.pkg, g.file
		want, err := exec.Command("go", "run", "./internal/gen/"+g.gen, "-pkg", pkg, "-o", "-").Output()
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
