package shardlimitotel_test

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

// TestReadmeGoBlocksCompile vets, as complete programs, the README's ```go
// blocks that use this module (the repository's own test leaves them to
// this one): in a scratch module that requires this module and shardlimit
// through replace directives, offline, from the module cache this
// module's build filled.
func TestReadmeGoBlocksCompile(t *testing.T) {
	const self = "github.com/shardlimit/shardlimit/exporters/shardlimitotel"
	vetReadmeBlocks(t, self)
}

// vetReadmeBlocks vets the README's ```go blocks that import module self,
// found in ../../README.md.
func vetReadmeBlocks(t *testing.T, self string) {
	if testing.Short() {
		t.Skip("runs the go command; skipped with -short")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command in PATH: %v", err)
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	n := 0
	var cur *strings.Builder
	line := 0
	sc := bufio.NewScanner(bytes.NewReader(readme))
	for i := 1; sc.Scan(); i++ {
		l := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(l) == "```go":
			cur, line = &strings.Builder{}, i
		case cur != nil && strings.TrimSpace(l) == "```":
			code := cur.String()
			cur = nil
			if !strings.Contains(code, `"`+self+`"`) {
				continue
			}
			if !strings.HasPrefix(code, "package main\n") {
				t.Errorf("README.md:%d: the ```go block is not a complete program (package main)", line)
				continue
			}
			pkg := filepath.Join(dir, fmt.Sprintf("readme_line_%d", line))
			if err := os.Mkdir(pkg, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(pkg, "main.go"), []byte(code), 0o600); err != nil {
				t.Fatal(err)
			}
			n++
		case cur != nil:
			cur.WriteString(l + "\n")
		}
	}
	if n == 0 {
		t.Fatalf("README.md has no ```go block that imports %s", self)
	}
	var sum []byte
	for _, p := range []string{filepath.Join(repo, "go.sum"), filepath.Join(here, "go.sum")} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		sum = append(sum, b...)
	}
	// The scratch module requires everything this module does, indirect
	// requirements included, so its module graph is this module's pruned
	// one: with GOPROXY off it must not need a go.mod that this module's
	// build never downloaded (as on a fresh machine).
	own, err := os.ReadFile(filepath.Join(here, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	gomod, ok := strings.CutPrefix(string(own), "module "+self+"\n")
	if !ok {
		t.Fatalf("go.mod does not start with module %s", self)
	}
	gomod = "module readme.example\n" + strings.ReplaceAll(gomod, "=> ../..", "=> "+repo) +
		fmt.Sprintf("\nrequire %s v0.0.0\n\nreplace %s => %s\n", self, self, here)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goTool, "vet", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off", "GOWORK=off", "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("the README's Go blocks that use %s do not build (readme_line_N opens at README.md line N): %v\n%s", self, err, out)
	}
}
