package shardlimit

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeCommandsAreTrue keeps the README's first screen honest: its
// test command is the one .ci/run runs first, and its demo command names a
// package that exists.
func TestReadmeCommandsAreTrue(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	ci, err := os.ReadFile(".ci/run")
	if err != nil {
		t.Fatal(err)
	}
	// .ci/run gives the command on the line after this marker.
	const marker = "# The test command, exactly as README.md gives it:\n"
	_, after, ok := strings.Cut(string(ci), marker)
	cmd, _, _ := strings.Cut(after, "\n")
	if !ok || !strings.HasPrefix(cmd, "go test -race") {
		t.Fatalf(".ci/run gives no test command after %q", marker)
	}
	first := string(readme)
	if i := strings.Index(first, "## "); i > 0 {
		first = first[:i] // the first screen: before the first section
	}
	if !strings.Contains(first, "\n"+cmd+"\n") {
		t.Fatalf("README's first screen does not give .ci/run's test command %q", cmd)
	}
	if !strings.Contains(first, "go run ./cmd/shardlimit-demo") {
		t.Fatal("README's first screen does not say how to run the demo")
	}
	if _, err := os.Stat("cmd/shardlimit-demo/main.go"); err != nil {
		t.Fatal(err)
	}
}
