package outbound

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// TransportConfig configures a Transport. Pacer is required.
type TransportConfig struct {
	// Pacer paces the requests and holds their keys (required). Its
	// FailFast says whether a request waits for its turn or fails fast.
	Pacer *Pacer

	// Base sends the requests that the Pacer lets through. Default
	// http.DefaultTransport.
	Base http.RoundTripper

	// Key returns a request's key. Default HostKey: one budget per host
	// and port. The string must stay valid after the call (Hold keeps
	// it); an error fails the request with an error wrapping
	// ErrInvalidKey and the Key's error.
	Key func(*http.Request) (string, error)
}

// Transport is an http.RoundTripper that paces requests per key (by
// default the host) with a Pacer and honours a server's 429 (Too Many
// Requests) and 503 (Service Unavailable) answers: when either carries a
// Retry-After (RFC 9110, section 10.2.3), in delay-seconds or as an
// HTTP-date, Transport holds the request's key until then, so every later
// request on that key waits, or fails fast, until the server's time. A 429
// or 503 without a usable Retry-After holds nothing; the limiter alone
// paces the key then.
//
// Transport never retries: the 429 or 503 response goes back to the
// caller as it came (its body unread), and the caller's next request on
// the key waits for the hold. A request that fails fast, or whose wait
// ends in an error, is not sent: its body is closed, as the RoundTripper
// contract requires, and never read (a retry needs req.GetBody, which
// http.NewRequest sets for in-memory bodies). Errors wrap ErrLimited,
// ErrHeld, ErrInvalidKey or the Pacer's and Base's errors.
//
// Build it with NewTransport; it is safe for concurrent use. Its allowed
// path allocates nothing beyond Base's (BenchmarkTransport).
type Transport struct {
	pacer *Pacer
	base  http.RoundTripper
	key   func(*http.Request) (string, error)
}

// NewTransport returns a Transport for cfg. It returns an error wrapping
// ErrInvalidConfig if cfg.Pacer is nil.
func NewTransport(cfg TransportConfig) (*Transport, error) {
	if cfg.Pacer == nil {
		return nil, fmt.Errorf("%w: TransportConfig.Pacer is required", ErrInvalidConfig)
	}
	if cfg.Base == nil {
		cfg.Base = http.DefaultTransport
	}
	if cfg.Key == nil {
		cfg.Key = HostKey
	}
	return &Transport{pacer: cfg.Pacer, base: cfg.Base, key: cfg.Key}, nil
}

// RoundTrip implements http.RoundTripper: it takes the request's turn
// from the Pacer (in the request's context), sends the request through
// Base, and holds the key on a 429 or 503 with a Retry-After.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	key, err := t.key(req)
	if err != nil {
		closeBody(req)
		return nil, fmt.Errorf("%w: %s %s: %w", ErrInvalidKey, req.Method, req.URL.Redacted(), err)
	}
	if err := t.pacer.Take(req.Context(), key, 1); err != nil {
		closeBody(req)
		return nil, err
	}
	resp, err := t.base.RoundTrip(req)
	if err == nil && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) {
		if d, ok := RetryDelay(resp.Header, t.pacer.clock.Now()); ok {
			_ = t.pacer.HoldFor(key, d) // an invalid key was refused by Take
		}
	}
	return resp, err
}

// closeBody closes req's body without reading it.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// HostKey is Transport's default key: the request URL's host in lower
// case, with its port unless it is the scheme's default (443 for https,
// 80 for http), so "API.example.com:443" and "api.example.com" share one
// budget. It allocates only for a host with upper-case letters. It
// returns an error for a URL without a host.
func HostKey(req *http.Request) (string, error) {
	if req.URL == nil || req.URL.Host == "" {
		return "", fmt.Errorf("outbound: the request URL has no host")
	}
	h := req.URL.Host
	switch {
	case req.URL.Scheme == "https" && strings.HasSuffix(h, ":443"):
		h = h[:len(h)-4]
	case req.URL.Scheme == "http" && strings.HasSuffix(h, ":80"):
		h = h[:len(h)-3]
	}
	for i := 0; i < len(h); i++ {
		if 'A' <= h[i] && h[i] <= 'Z' {
			return strings.ToLower(h), nil
		}
	}
	return h, nil
}

// RetryDelay returns the delay a response's Retry-After header asks for
// (RFC 9110, section 10.2.3) and true, or 0 and false if h has none or
// it is malformed. Delay-seconds are a count of seconds (a fraction,
// which the RFC does not allow but some servers send, is rounded up;
// huge counts saturate). An HTTP-date (any of the three forms RFC 9110
// requires recipients to accept) is measured from the response's Date
// header when it has one, so the client's and server's clocks need not
// agree, else from now. A delay of 0 or a date in the past returns 0 and
// true.
func RetryDelay(h http.Header, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if d, ok := parseDelaySeconds(v); ok {
		return d, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if date, err := http.ParseTime(h.Get("Date")); err == nil {
		now = date
	}
	return max(0, at.Sub(now)), true
}

// maxDelaySeconds saturates delay-seconds below time.Duration's range.
const maxDelaySeconds = int64(1<<63-1) / int64(time.Second)

// parseDelaySeconds parses delay-seconds: digits, optionally a fraction
// (rounded up to the next whole second). Huge counts saturate.
func parseDelaySeconds(v string) (time.Duration, bool) {
	whole, frac, dot := strings.Cut(v, ".")
	if whole == "" || !allDigits(whole) || dot && (frac == "" || !allDigits(frac)) {
		return 0, false
	}
	var s int64
	for i := 0; i < len(whole); i++ {
		s = min(s*10+int64(whole[i]-'0'), maxDelaySeconds)
	}
	if strings.Trim(frac, "0") != "" && s < maxDelaySeconds {
		s++
	}
	return time.Duration(s) * time.Second, true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
