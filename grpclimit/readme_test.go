package grpclimit

import (
	"os"
	"testing"

	"github.com/shardlimit/shardlimit/internal/readmetest"
)

// TestReadmeGoBlocksCompile vets every ```go block of README.md as a
// complete program, offline, in a scratch module that requires this module
// and all it requires (see readmetest.Vet).
func TestReadmeGoBlocksCompile(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmetest.GoBlocks(readme)
	if len(blocks) < 3 {
		t.Fatalf("README.md has %d ```go blocks, want the server, the client and the go-grpc-middleware programs", len(blocks))
	}
	readmetest.Vet(t, ".", "..", blocks)
}
