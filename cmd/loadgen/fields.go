package main

import (
	"bytes"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// Where a route's window came from.
const (
	fromWindowMs = "X-RateLimit-Window-Ms"
	fromPolicy   = "RateLimit-Policy"
	fromFlag     = "-window"
)

// fields are the rate-limit response fields the report uses.
type fields struct {
	limit      int64         // X-RateLimit-Limit, else RateLimit-Policy q=; 0 if absent
	window     time.Duration // X-RateLimit-Window-Ms, else RateLimit-Policy w=; 0 if absent
	windowFrom string        // fromWindowMs or fromPolicy
	strategy   string        // X-RateLimit-Strategy
}

// readFields reads the rate-limit fields of a response. Malformed values
// are ignored, as if absent.
func readFields(h *fasthttp.ResponseHeader) fields {
	var f fields
	q, w := parsePolicy(h.Peek("RateLimit-Policy"), serviceName(h.Peek("RateLimit")))
	if n, ok := positiveInt(h.Peek("X-RateLimit-Limit")); ok {
		f.limit = n
	} else {
		f.limit = q
	}
	if ms, ok := positiveInt(h.Peek("X-RateLimit-Window-Ms")); ok && ms <= int64(MaxWindow/time.Millisecond) {
		f.window, f.windowFrom = time.Duration(ms)*time.Millisecond, fromWindowMs
	} else if w > 0 {
		f.window, f.windowFrom = w, fromPolicy
	}
	if s := h.Peek("X-RateLimit-Strategy"); len(s) > 0 && len(s) <= 32 {
		f.strategy = string(s)
	}
	return f
}

// MaxWindow is the longest window read from a response; longer values are
// ignored as malformed.
const MaxWindow = 365 * 24 * time.Hour

// positiveInt parses a decimal integer above zero.
func positiveInt(b []byte) (int64, bool) {
	n, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	return n, err == nil && n > 0
}

// serviceName returns the policy name of the first item of a RateLimit
// field (draft-ietf-httpapi-ratelimit-headers), such as `"baz-1m"` of
// `"baz-1m";r=0;t=57`, quotes included; nil if there is none.
func serviceName(v []byte) []byte {
	v = bytes.TrimSpace(v)
	if i := bytes.IndexByte(v, ';'); i > 0 {
		return bytes.TrimSpace(v[:i])
	}
	return nil
}

// parsePolicy reads the quota q and the window w (seconds) of a
// RateLimit-Policy field (draft-ietf-httpapi-ratelimit-headers), such as
// `"client-1-foo";q=10;w=60`: of the policy named name (the one RateLimit
// reports, which the X-RateLimit fields report too, when a rule has
// several limits), else of the first. Absent or malformed parameters are 0.
func parsePolicy(v, name []byte) (q int64, w time.Duration) {
	members := bytes.Split(v, []byte(",")) // names with commas are not used
	v = members[0]
	for _, m := range members {
		if n, _, _ := bytes.Cut(m, []byte(";")); len(name) > 0 && bytes.Equal(bytes.TrimSpace(n), name) {
			v = m
			break
		}
	}
	params := bytes.Split(v, []byte(";"))
	for _, p := range params[1:] {
		k, val, ok := bytes.Cut(bytes.TrimSpace(p), []byte("="))
		if !ok {
			continue
		}
		n, ok := positiveInt(val)
		if !ok {
			continue
		}
		switch string(k) {
		case "q":
			q = n
		case "w":
			if n <= int64(MaxWindow/time.Second) {
				w = time.Duration(n) * time.Second
			}
		}
	}
	return q, w
}
