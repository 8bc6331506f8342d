package mwengine

import (
	"fmt"
	"testing"

	"github.com/shardlimit/shardlimit/httplimit"
)

// TestTopDeniedListsNoPairBelowOneLeftOut replays the tester's sequence:
// with a summary of 4, 192.0.2.8 denied 3 times and 192.0.2.1 denied 4
// times; listing 192.0.2.8 without 192.0.2.1 would claim it was certainly
// denied more often. Every pair listed must have been denied more often
// than every pair left out.
func TestTopDeniedListsNoPairBelowOneLeftOut(t *testing.T) {
	e := newTestEngine(t, httplimit.Options{
		Rules:     mustParse(t, `{"rules": [{"name": "r", "limit": 0, "window": "1m"}]}`),
		TopDenied: 4,
	})
	truth := map[string]uint64{}
	for _, c := range []int{0, 1, 2, 1, 6, 6, 7, 0, 3, 0, 7, 0, 7} {
		ip := fmt.Sprintf("192.0.2.%d", c+1)
		decide(e, ip, "", "/", 0, 1)
		truth["ip:"+ip]++
	}
	top, _ := e.TopDenied(0)
	listed := map[string]bool{}
	for _, d := range top {
		listed[d.Key] = true
	}
	for _, d := range top {
		for k, n := range truth {
			if !listed[k] && n >= truth[d.Key] {
				t.Errorf("TopDenied lists %s (denied %d times) but not %s (denied %d times): %v", d.Key, truth[d.Key], k, n, top)
			}
		}
	}
}
