package main

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

// TestParseClients checks good specs and the errors of bad ones.
func TestParseClients(t *testing.T) {
	good := []struct {
		spec string
		want []Stream
	}{
		{"client-1:/foo=20/s,client-1:/bar=10/s,client-2:/foo=30/s,anon:/foo=5/s", []Stream{
			{"client-1", "/foo", 20}, {"client-1", "/bar", 10}, {"client-2", "/foo", 30}, {"anon", "/foo", 5},
		}},
		{" a:/x=90/min , b:/y?q=1=0.5/s ", []Stream{{"a", "/x", 1.5}, {"b", "/y?q=1", 0.5}}},
		{"a:/x=600/h", []Stream{{"a", "/x", 1.0 / 6}}},
		{"a:/x=5/10s", []Stream{{"a", "/x", 0.5}}},
		{"a:/x=1/500ms", []Stream{{"a", "/x", 2}}},
		{"a:/x=3/m,a:/y=3/sec", []Stream{{"a", "/x", 0.05}, {"a", "/y", 3}}},
		{"a:/=1/s", []Stream{{"a", "/", 1}}},
	}
	for _, c := range good {
		got, err := ParseClients(c.spec)
		if err != nil {
			t.Errorf("ParseClients(%q): %v", c.spec, err)
			continue
		}
		if len(got) != len(c.want) {
			t.Errorf("ParseClients(%q) = %v, want %v", c.spec, got, c.want)
			continue
		}
		for i := range got {
			g, w := got[i], c.want[i]
			if g.Client != w.Client || g.Route != w.Route || math.Abs(g.Rate-w.Rate) > 1e-9 {
				t.Errorf("ParseClients(%q)[%d] = %+v, want %+v", c.spec, i, g, w)
			}
		}
	}

	bad := []struct{ spec, want string }{
		{"", "empty"},
		{"  ", "empty"},
		{"client-1/foo=5/s", `item 1 "client-1/foo=5/s": want client:/route=rate`},
		{":/foo=5/s", "empty client name"},
		{"a:foo=5/s", `route "foo" must start with /`},
		{"a:/foo", "missing =rate"},
		{"a:/foo=5", `rate "5" needs a unit, e.g. 5/s`},
		{"a:/foo=x/s", "is not a number"},
		{"a:/foo=NaN/s", "is not a number"},
		{"a:/foo=Inf/s", "is not a number"},
		{"a:/foo=5/parsec", `unit "parsec" is not s, min, h`},
		{"a:/foo=5/-1s", "unit"},
		{"a:/foo=0/s", "must be above zero"},
		{"a:/foo=-1/s", "must be above zero"},
		{"a:/foo=1e9/s", "above the maximum of 100000/s"},
		{"a:/foo=5/s,,b:/x=1/s", `item 2 "": empty item`},
		{"a:/foo=5/s,", `item 2 "": empty item`},
		{"a:/foo=5/s,a:/foo=1/s", "client a and route /foo given twice"},
		{"a b:/foo=1/s", "client name"},
		{"a:/fo o=1/s", "route"},
		{"a:/foo#x=1/s", "fragment"},
		{"ü:/foo=1/s", "printable ASCII"},
	}
	for _, c := range bad {
		_, err := ParseClients(c.spec)
		if err == nil {
			t.Errorf("ParseClients(%q): no error, want %q", c.spec, c.want)
			continue
		}
		if !errors.Is(err, errSpec) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseClients(%q) = %q, want errSpec and %q", c.spec, err, c.want)
		}
	}
}

// TestPlannedSends checks the count of sends scheduled in a duration.
func TestPlannedSends(t *testing.T) {
	for _, c := range []struct {
		rate float64
		d    time.Duration
		want int
	}{
		{20, 2500 * time.Millisecond, 50},
		{3, time.Second, 3},
		{0.5, 10 * time.Second, 5},
		{1.0 / 6, 10 * time.Second, 2}, // at 0 s and 6 s
		{7, 0, 0},
		{100000, 10 * time.Minute, 60000000},
	} {
		if got := plannedSends(c.rate, c.d); got != c.want {
			t.Errorf("plannedSends(%v, %v) = %d, want %d", c.rate, c.d, got, c.want)
		}
	}
}

// seedRules is the part of cmd/shardlimit-demo/rules.json the default mix
// depends on.
type seedRules struct {
	Rules []seedRule `json:"rules"`
	Tiers []struct {
		Clients []string   `json:"clients"`
		Rules   []seedRule `json:"rules"`
	} `json:"tiers"`
}

// seedRule is one rule of seedRules: a limit and window, or several.
type seedRule struct {
	Path   string `json:"path"`
	Limit  int    `json:"limit"`
	Window string `json:"window"`
	Limits []struct {
		Limit  int    `json:"limit"`
		Window string `json:"window"`
	} `json:"limits"`
}

// longest returns the limit and window of r's longest window.
func (r seedRule) longest(t *testing.T) (int, time.Duration) {
	t.Helper()
	limit, window := r.Limit, r.Window
	var longest time.Duration
	for _, l := range r.Limits {
		w, err := time.ParseDuration(l.Window)
		if err != nil {
			t.Fatal(err)
		}
		if w > longest {
			longest, limit, window = w, l.Limit, l.Window
		}
	}
	w, err := time.ParseDuration(window)
	if err != nil {
		t.Fatal(err)
	}
	return limit, w
}

// TestDefaultMixMatchesSeedRules checks that `go run ./cmd/loadgen` with no
// flags against the demo shows clients held at their limits: every client
// of DefaultClients is one the seed rules know, and in the default 10 s
// most streams ask for more than their limit while one stays under it.
func TestDefaultMixMatchesSeedRules(t *testing.T) {
	data, err := os.ReadFile("../shardlimit-demo/rules.json")
	if err != nil {
		t.Fatal(err)
	}
	var sr seedRules
	if err := json.Unmarshal(data, &sr); err != nil {
		t.Fatal(err)
	}
	ruleFor := func(client, path string) (seedRule, bool) {
		for _, tier := range sr.Tiers {
			for _, c := range tier.Clients {
				if c != client {
					continue
				}
				for _, r := range tier.Rules {
					if r.Path == path {
						return r, true
					}
				}
			}
		}
		for _, r := range sr.Rules {
			if r.Path == path {
				return r, true
			}
		}
		return seedRule{}, false
	}
	streams, err := ParseClients(DefaultClients)
	if err != nil {
		t.Fatal(err)
	}
	over, under, unlimited := 0, 0, 0
	for _, s := range streams {
		r, ok := ruleFor(s.Client, s.Route)
		if !ok {
			if s.Route != "/healthz" {
				t.Errorf("default stream %s %s has no seed rule", s.Client, s.Route)
			}
			unlimited++
			continue
		}
		if s.Client != Anonymous && !strings.Contains(string(data), `"`+s.Client+`"`) {
			t.Errorf("default client %s is not in the seed rules' tiers", s.Client)
		}
		// A rule of several limits is judged by its longest window's.
		limit, w := r.longest(t)
		// The default 10 s run sits in at most two windows of a minute.
		sent := plannedSends(s.Rate, 10*time.Second)
		if w < 10*time.Second {
			t.Errorf("seed rule %s has window %v; the default mix assumes a minute", r.Path, w)
		}
		if sent > 2*limit {
			over++
		} else if sent <= limit {
			under++
		}
	}
	if over < 3 || under < 1 || unlimited < 1 {
		t.Errorf("default mix: %d streams over twice their limit, %d under it, %d unlimited; want at least 3, 1, 1", over, under, unlimited)
	}
}
