package shardlimit

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// readmeBlock is one ```go block of README.md.
type readmeBlock struct {
	line int    // the line of its opening fence
	code string // its text
}

// readmeGoBlocks returns the ```go blocks of a Markdown text.
func readmeGoBlocks(md []byte) []readmeBlock {
	var blocks []readmeBlock
	var cur *readmeBlock
	sc := bufio.NewScanner(bytes.NewReader(md))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```go":
			cur = &readmeBlock{line: n}
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.code += line + "\n"
		}
	}
	return blocks
}

// TestReadmeGoBlocksCompile keeps the README's Go code true: every ```go
// block is a complete program, and each is vetted (so compiled) as a
// package of a scratch module that requires this repository through a
// replace directive, offline, from the module cache the repository's own
// build filled.
func TestReadmeGoBlocksCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command; skipped with -short")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command in PATH: %v", err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmeGoBlocks(readme)
	if len(blocks) < 3 {
		t.Fatalf("README.md has %d ```go blocks; the quickstart, middleware and sync ones are missing", len(blocks))
	}
	repo, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// The scratch module requires everything shardlimit does, indirect
	// requirements included, so its module graph is shardlimit's pruned
	// one: with GOPROXY off it must not need a go.mod that shardlimit's
	// build never downloaded (as on a fresh machine).
	own, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	gomod, ok := strings.CutPrefix(string(own), "module github.com/shardlimit/shardlimit\n")
	if !ok {
		t.Fatal("go.mod does not start with module github.com/shardlimit/shardlimit")
	}
	gomod = "module readme.example\n" + gomod +
		fmt.Sprintf("\nrequire github.com/shardlimit/shardlimit v0.0.0\n\nreplace github.com/shardlimit/shardlimit => %s\n", repo)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		if strings.Contains(b.code, `"github.com/shardlimit/shardlimit/exporters/`) {
			// Vetted by the exporter's own module (its readme_test.go),
			// whose dependencies this module does not have.
			continue
		}
		if !strings.HasPrefix(b.code, "package main\n") {
			t.Errorf("README.md:%d: the ```go block is not a complete program (package main)", b.line)
			continue
		}
		pkg := filepath.Join(dir, fmt.Sprintf("readme_line_%d", b.line))
		if err := os.Mkdir(pkg, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkg, "main.go"), []byte(b.code), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The blocks import packages of this module (fasthttpmw, sync) whose
	// dependencies a run of this package alone has not downloaded.
	if out, err := exec.Command(goTool, "mod", "download").CombinedOutput(); err != nil {
		t.Fatalf("go mod download: %v\n%s", err, out)
	}
	cmd := exec.Command(goTool, "vet", "./...")
	cmd.Dir = dir
	// -mod=mod lets go record the snippets' direct imports (go-redis,
	// fasthttp) in the scratch go.mod; GOPROXY=off keeps it offline.
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off", "GOWORK=off", "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("the README's Go blocks do not build (readme_line_N is the block opening at README.md line N): %v\n%s", err, out)
	}
}
