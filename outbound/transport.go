package outbound

import (
	"fmt"
	"io"
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

	// Retries is how many times a request answered 429, or 503 for an
	// idempotent method (RFC 9110, section 9.2.2), with a Retry-After is
	// sent again, each time after the hold that answer set and a turn
	// from the Pacer, in [0, MaxRetries]. Default 0: Transport never
	// retries; a Pacer that fails fast (Config.FailFast) never waits for
	// a hold, so Retries > 0 with one is a config error. A request is
	// retried only if its body can be replayed (no body, or req.GetBody
	// set), the Retry-After is at most Config.MaxHold (a retry never goes before
	// the server's time), and the hold ends before the request
	// context's deadline; otherwise the
	// answer goes back to the caller. Each retry closes the previous
	// answer's body after reading at most 64 KiB of it (so the connection
	// can be reused).
	Retries int
}

// MaxRetries is the largest TransportConfig.Retries.
const MaxRetries = 100

// Transport is an http.RoundTripper that paces requests per key (by
// default the host) with a Pacer and honours a server's 429 (Too Many
// Requests) and 503 (Service Unavailable) answers: when either carries a
// Retry-After (RFC 9110, section 10.2.3), in delay-seconds or as an
// HTTP-date, Transport holds the request's key until then, so every later
// request on that key waits, or fails fast, until the server's time. A 429
// or 503 without a usable Retry-After holds nothing; the limiter alone
// paces the key then.
//
// Transport does not retry unless asked (TransportConfig.Retries): the
// 429 or 503 response goes back to the caller as it came (its body
// unread), and the caller's next request on the key waits for the hold.
// A request that fails fast, or whose wait ends in an error, is not
// sent: its body is closed, as the RoundTripper contract requires, and
// never read (a retry needs req.GetBody, which http.NewRequest sets for
// in-memory bodies). A retry whose turn fails returns that error; the
// answer it would have replaced is closed by then. Errors wrap
// ErrLimited, ErrHeld, ErrInvalidKey or the Pacer's errors; Base's come
// back as Base returned them.
//
// Build it with NewTransport; it is safe for concurrent use. Its allowed
// path allocates nothing beyond Base's (BenchmarkTransport).
type Transport struct {
	pacer   *Pacer
	base    http.RoundTripper
	key     func(*http.Request) (string, error)
	retries int
}

// NewTransport returns a Transport for cfg. It returns an error wrapping
// ErrInvalidConfig if cfg.Pacer is nil, cfg.Retries is out of range, or
// cfg.Retries > 0 with a Pacer that fails fast.
func NewTransport(cfg TransportConfig) (*Transport, error) {
	if cfg.Pacer == nil {
		return nil, fmt.Errorf("%w: TransportConfig.Pacer is required", ErrInvalidConfig)
	}
	if cfg.Retries < 0 || cfg.Retries > MaxRetries {
		return nil, fmt.Errorf("%w: Retries %d out of [0, %d]", ErrInvalidConfig, cfg.Retries, MaxRetries)
	}
	if cfg.Retries > 0 && cfg.Pacer.failFast {
		return nil, fmt.Errorf("%w: Retries %d with a Pacer that fails fast, which never waits for a retry's hold", ErrInvalidConfig, cfg.Retries)
	}
	if cfg.Base == nil {
		cfg.Base = http.DefaultTransport
	}
	if cfg.Key == nil {
		cfg.Key = HostKey
	}
	return &Transport{pacer: cfg.Pacer, base: cfg.Base, key: cfg.Key, retries: cfg.Retries}, nil
}

// RoundTrip implements http.RoundTripper: it takes the request's turn
// from the Pacer (in the request's context), sends the request through
// Base, holds the key on a 429 or 503 with a Retry-After, and sends it
// again if TransportConfig.Retries allows.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	key, err := t.key(req)
	if err != nil {
		closeBody(req)
		return nil, fmt.Errorf("%w: %s %s: %w", ErrInvalidKey, req.Method, req.URL.Redacted(), err)
	}
	for attempt := 0; ; attempt++ {
		if err := t.pacer.Take(req.Context(), key, 1); err != nil {
			closeBody(req)
			return nil, err
		}
		resp, err := t.base.RoundTrip(req)
		if err != nil || !t.hold(key, resp) || !t.retry(key, req, resp, attempt) {
			return resp, err
		}
		if req, err = replay(req); err != nil {
			return nil, err
		}
	}
}

// CloseIdleConnections closes Base's idle connections if Base has a
// CloseIdleConnections method (as *http.Transport does), so that
// http.Client.CloseIdleConnections reaches them through Transport.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// hold holds key if resp is a 429 or 503 with a usable Retry-After, and
// reports whether the hold covers the whole delay asked for (one cut to
// Config.MaxHold does not: a retry after it would go before the
// server's time).
func (t *Transport) hold(key string, resp *http.Response) bool {
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
		return false
	}
	d, ok := RetryDelay(resp.Header, t.pacer.clock.Now())
	if ok {
		_ = t.pacer.HoldFor(key, d) // an invalid key was refused by Take
	}
	return ok && d <= t.pacer.maxHold
}

// retry reports whether req of key, answered resp (a 429 or 503 that
// set a hold) on its attempt-th try from 0, is to be sent again (see
// TransportConfig.Retries), and if so closes resp's body.
func (t *Transport) retry(key string, req *http.Request, resp *http.Response, attempt int) bool {
	if attempt >= t.retries ||
		resp.StatusCode == http.StatusServiceUnavailable && !idempotent(req.Method) ||
		req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	if dl, ok := req.Context().Deadline(); ok {
		if until, held := t.pacer.Held(key); held && dl.Before(until) {
			return false
		}
	}
	_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
	_ = resp.Body.Close()
	return true
}

// replay returns a copy of req with a fresh body from req.GetBody.
func replay(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, fmt.Errorf("outbound: replay the body of %s %s: %w", req.Method, req.URL.Redacted(), err)
	}
	r := req.Clone(req.Context())
	r.Body = body
	return r, nil
}

// idempotent reports whether method is idempotent (RFC 9110, section
// 9.2.2).
func idempotent(method string) bool {
	switch method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
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
