package main

import (
	"regexp"
	"testing"

	"github.com/shardlimit/shardlimit/internal/mwtest"
)

// TestDemoStatusListsEveryLimit: /status, the page for people, gives each
// rule's limits; for /baz, limited to 3 a second and 10 a minute, both,
// not only the minute's.
func TestDemoStatusListsEveryLimit(t *testing.T) {
	d := startDemo(t)
	c := mwtest.NewClient(t, d.url, 1)
	d.clock.At(mwtest.Sec(20))
	r := c.Get("/status")
	if r.Status != 200 {
		t.Fatalf("/status: %d", r.Status)
	}
	for _, re := range []string{
		`(?m)^baz +- +/baz +fixed_window +3/1s,10/1m +0 +0 +0 `,
		`(?m)^anon-foo +- +/foo +fixed_window +5/1m +0 `,
	} {
		if !regexp.MustCompile(re).MatchString(r.Body) {
			t.Errorf("/status does not match %s:\n%s", re, r.Body)
		}
	}
}
