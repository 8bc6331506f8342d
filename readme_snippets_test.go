package shardlimit

import (
	"os"
	"strings"
	"testing"

	"github.com/shardlimit/shardlimit/internal/readmetest"
)

// TestReadmeGoBlocksCompile keeps the README's Go code true: every ```go
// block is a complete program, and each is vetted (so compiled) as a
// package of a scratch module that requires this repository, offline (see
// readmetest.Vet). The blocks that import an exporter module are vetted by
// that module's own test: this module does not have their dependencies.
func TestReadmeGoBlocksCompile(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []readmetest.Block
	all := readmetest.GoBlocks(readme)
	for _, b := range all {
		if !strings.Contains(b.Code, `"github.com/shardlimit/shardlimit/exporters/`) {
			blocks = append(blocks, b)
		}
	}
	if len(all) < 3 {
		t.Fatalf("README.md has %d ```go blocks; the quickstart, middleware and sync ones are missing", len(all))
	}
	readmetest.Vet(t, ".", ".", blocks)
}
