//go:build !race

package topk

import (
	"strconv"
	"testing"
)

// TestAddDoesNotAllocate checks that Add allocates nothing, for monitored
// items and for new ones that replace others.
func TestAddDoesNotAllocate(t *testing.T) {
	s := New(8, 16)
	keys := make([][]byte, 100)
	for i := range keys {
		keys[i] = []byte("ip:192.0.2." + strconv.Itoa(i))
	}
	i := 0
	if n := testing.AllocsPerRun(1000, func() {
		s.Add("rule", keys[i%len(keys)], 1) // mostly replacements
		s.Add("rule", keys[0], 1)           // then a monitored one
		i++
	}); n != 0 {
		t.Fatalf("%v allocations per Add, want 0", n)
	}
}
