package httplimit

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeRulesParse keeps the README's rule files true: every ```json
// block of README.md is a rule file ParseRules accepts.
func TestReadmeRulesParse(t *testing.T) {
	md, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	for rest := string(md); ; {
		_, after, ok := strings.Cut(rest, "\n```json\n")
		if !ok {
			break
		}
		block, tail, ok := strings.Cut(after, "\n```\n")
		if !ok {
			t.Fatal("a ```json block of README.md is not closed")
		}
		blocks++
		if _, err := ParseRules([]byte(block)); err != nil {
			t.Errorf("README.md rule file %d: %v\n%s", blocks, err, block)
		}
		rest = tail
	}
	if blocks == 0 {
		t.Error("README.md has no ```json rule file")
	}
}
