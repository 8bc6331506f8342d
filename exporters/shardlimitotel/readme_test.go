package shardlimitotel_test

import (
	"os"
	"strings"
	"testing"

	"github.com/shardlimit/shardlimit/internal/readmetest"
)

// TestReadmeGoBlocksCompile vets, as complete programs, the README's ```go
// blocks that use this module (the repository's own test leaves them to
// this one), offline, in a scratch module that requires this module and
// all it requires (see readmetest.Vet).
func TestReadmeGoBlocksCompile(t *testing.T) {
	const self = "github.com/shardlimit/shardlimit/exporters/shardlimitotel"
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []readmetest.Block
	for _, b := range readmetest.GoBlocks(readme) {
		if strings.Contains(b.Code, `"`+self+`"`) {
			blocks = append(blocks, b)
		}
	}
	if len(blocks) == 0 {
		t.Fatalf("README.md has no ```go block that imports %s", self)
	}
	readmetest.Vet(t, ".", "../..", blocks)
}
