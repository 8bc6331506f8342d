// Package readmetest keeps a README's Go code true: its ```go blocks, each
// a complete program, are vetted (so compiled) as packages of a scratch
// module. The repository's own tests and each exporter module's use it,
// each for the blocks that import it.
package readmetest

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

// Block is one ```go block of a Markdown text.
type Block struct {
	Line int    // the line of its opening fence, from 1
	Code string // its text
}

// GoBlocks returns the ```go blocks of a Markdown text, in order.
func GoBlocks(md []byte) []Block {
	var blocks []Block
	var cur *Block
	sc := bufio.NewScanner(bytes.NewReader(md))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```go":
			cur = &Block{Line: n}
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.Code += line + "\n"
		}
	}
	return blocks
}

// Vet vets blocks, each as package main of its own in a scratch module
// that requires the module in directory dir (replaced by dir) and
// everything that module's go.mod requires, indirect requirements
// included, so that the scratch module's graph is that module's pruned
// one; replace directives in that go.mod that point at root, the
// repository, by its path relative to dir ("=> ../.." from an exporter,
// "=> .." from grpclimit), point at root there too. It runs `go mod download` in dir first (what dir's module
// needs and a run of one of its packages may not have fetched), then `go
// vet` offline (GOPROXY=off). A block that is not a complete program
// (package main) is an error. It skips with -short or without a go
// command.
func Vet(t *testing.T, dir, root string, blocks []Block) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the go command; skipped with -short")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command in PATH: %v", err)
	}
	if dir, err = filepath.Abs(dir); err != nil {
		t.Fatal(err)
	}
	if root, err = filepath.Abs(root); err != nil {
		t.Fatal(err)
	}
	own, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	first, rest, _ := strings.Cut(string(own), "\n")
	module, ok := strings.CutPrefix(first, "module ")
	if !ok {
		t.Fatalf("%s/go.mod does not start with a module line", dir)
	}
	rel, err := filepath.Rel(dir, root)
	if err != nil {
		t.Fatal(err)
	}
	if rel != "." {
		rest = strings.ReplaceAll(rest, "=> "+filepath.ToSlash(rel), "=> "+root)
	}
	gomod := "module readme.example\n" + rest +
		fmt.Sprintf("\nrequire %s v0.0.0\n\nreplace %s => %s\n", module, module, dir)
	var sum []byte
	for _, d := range []string{root, dir} {
		b, err := os.ReadFile(filepath.Join(d, "go.sum"))
		if err != nil {
			t.Fatal(err)
		}
		sum = append(sum, b...)
	}
	scratch := t.TempDir()
	if err := os.WriteFile(filepath.Join(scratch, "go.mod"), []byte(gomod), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(scratch, "go.sum"), sum, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		if !strings.HasPrefix(b.Code, "package main\n") {
			t.Errorf("README.md:%d: the ```go block is not a complete program (package main)", b.Line)
			continue
		}
		pkg := filepath.Join(scratch, fmt.Sprintf("readme_line_%d", b.Line))
		if err := os.Mkdir(pkg, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkg, "main.go"), []byte(b.Code), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	download := exec.Command(goTool, "mod", "download")
	download.Dir = dir
	if out, err := download.CombinedOutput(); err != nil {
		t.Fatalf("go mod download in %s: %v\n%s", dir, err, out)
	}
	vet := exec.Command(goTool, "vet", "./...")
	vet.Dir = scratch
	// -mod=mod lets go record the blocks' direct imports in the scratch
	// go.mod; GOPROXY=off keeps it offline.
	vet.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off", "GOWORK=off", "GOTOOLCHAIN=local")
	if out, err := vet.CombinedOutput(); err != nil {
		t.Errorf("the README's Go blocks do not build (readme_line_N is the block opening at README.md line N): %v\n%s", err, out)
	}
}
