package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Anonymous is the client name that sends no identity header, so the server
// keys its requests by address (on loopback every anonymous stream is the
// same client, 127.0.0.1).
const Anonymous = "anon"

// MaxRate is the highest rate one stream may ask for, in requests per
// second.
const MaxRate = 100000

// DefaultClients is the mix run when -clients is not given. It matches the
// demo's seed rules (cmd/shardlimit-demo/rules.json: client-1 may call /foo
// 10 times a minute and /bar 5 times, client-2 20 and 10, anyone else 5 and
// 2; every client /baz 3 times a second and 10 times a minute; /healthz is
// not limited): in the default 10 s, client-1 on both routes, client-2 on
// /foo and the anonymous client on /foo and /baz ask for more than their
// limits and are held at them (on /baz 3 a second until the minute's 10
// are spent), client-2 on /bar stays under its limit (10 sent, all
// admitted in a fresh minute), and /healthz shows an unlimited route.
const DefaultClients = "client-1:/foo=5/s,client-1:/bar=2/s,client-2:/foo=5/s,client-2:/bar=1/s,anon:/foo=2/s,anon:/baz=5/s,anon:/healthz=10/s"

// Stream is one client calling one route at a steady rate.
type Stream struct {
	// Client is the identity sent in the identity header (-header);
	// Anonymous sends none.
	Client string `json:"client"`
	// Route is the path, optionally with a query, appended to the URL.
	Route string `json:"route"`
	// Rate is in requests per second, in (0, MaxRate].
	Rate float64 `json:"rate_per_s"`
}

// errSpec is wrapped by every client spec error.
var errSpec = errors.New("bad -clients spec")

// ParseClients parses a client spec: comma-separated items
// client:/route=rate, where client is a name without ':' or ',' (Anonymous
// for none), route starts with '/', and rate is a count per unit such as
// "20/s", "90/min", "0.5/s", "600/h" or "5/10s" (the unit is s, sec, m, min,
// h or any Go duration). Spaces around items are ignored. Each client and
// route pair may appear once. Errors wrap errSpec and name the item.
func ParseClients(spec string) ([]Stream, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, fmt.Errorf("%w: empty; want client:/route=rate[,...], e.g. %q", errSpec, "client-1:/foo=20/s")
	}
	var out []Stream
	seen := make(map[[2]string]bool)
	for i, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		s, err := parseItem(item)
		if err != nil {
			return nil, fmt.Errorf("%w: item %d %q: %v", errSpec, i+1, item, err)
		}
		k := [2]string{s.Client, s.Route}
		if seen[k] {
			return nil, fmt.Errorf("%w: item %d %q: client %s and route %s given twice", errSpec, i+1, item, s.Client, s.Route)
		}
		seen[k] = true
		out = append(out, s)
	}
	return out, nil
}

// parseItem parses one client:/route=rate item.
func parseItem(item string) (Stream, error) {
	if item == "" {
		return Stream{}, errors.New("empty item (a stray comma?)")
	}
	client, rest, ok := strings.Cut(item, ":")
	if !ok {
		return Stream{}, errors.New("want client:/route=rate")
	}
	eq := strings.LastIndexByte(rest, '=')
	if eq < 0 {
		return Stream{}, errors.New("missing =rate after the route")
	}
	route, rateText := rest[:eq], rest[eq+1:]
	if client == "" {
		return Stream{}, fmt.Errorf("empty client name (use %q for no identity)", Anonymous)
	}
	if err := checkToken(client); err != nil {
		return Stream{}, fmt.Errorf("client name: %v", err)
	}
	if !strings.HasPrefix(route, "/") {
		return Stream{}, fmt.Errorf("route %q must start with /", route)
	}
	if err := checkToken(route); err != nil {
		return Stream{}, fmt.Errorf("route: %v", err)
	}
	if strings.Contains(route, "#") {
		return Stream{}, fmt.Errorf("route %q has a fragment", route)
	}
	rate, err := ParseRate(rateText)
	if err != nil {
		return Stream{}, err
	}
	return Stream{Client: client, Route: route, Rate: rate}, nil
}

// checkToken reports an error unless s is printable ASCII without spaces.
func checkToken(s string) error {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("%q: only printable ASCII without spaces", s)
		}
	}
	return nil
}

// ParseRate parses a rate such as "20/s", "90/min", "0.5/s", "600/h" or
// "5/10s" into requests per second, in (0, MaxRate].
func ParseRate(s string) (float64, error) {
	num, unit, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("rate %q needs a unit, e.g. %s/s", s, s)
	}
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(n) || math.IsInf(n, 0) {
		return 0, fmt.Errorf("rate %q: %q is not a number", s, num)
	}
	var per time.Duration
	switch unit {
	case "s", "sec":
		per = time.Second
	case "m", "min":
		per = time.Minute
	case "h":
		per = time.Hour
	default:
		per, err = time.ParseDuration(unit)
		if err != nil || per <= 0 {
			return 0, fmt.Errorf("rate %q: unit %q is not s, min, h or a positive duration such as 10s", s, unit)
		}
	}
	r := n / per.Seconds()
	if !(r > 0) {
		return 0, fmt.Errorf("rate %q must be above zero", s)
	}
	if r > MaxRate {
		return 0, fmt.Errorf("rate %q is above the maximum of %d/s per stream", s, MaxRate)
	}
	return r, nil
}

// formatRate formats r requests per second compactly: "20/s", "0.5/s".
func formatRate(r float64) string {
	return strconv.FormatFloat(r, 'g', 4, 64) + "/s"
}
