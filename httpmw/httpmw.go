// Package httpmw is shardlimit's rate-limiting middleware for net/http: a
// decorator func(http.Handler) http.Handler that limits each client per
// route, with tiers, overrides, rules reloadable at runtime and the usual
// rate-limit headers. It shares its rules, key extraction and header
// formatting with package fasthttpmw.
//
// Each request is matched to at most one rule; its client key (address or
// identity, see KeyConfig) is decided by that rule's shardlimit.Limiter at
// the middleware clock's now, read when the middleware runs: Options.Clock,
// else a shardlimit.SystemClock which the limiters' janitors share, so
// decisions and evictions agree and wall-clock steps do not matter (see
// Options.Clock). For an admitted request the middleware sets
// the selected fields on the ResponseWriter's header and calls next; for a
// denied one it answers 429 Too Many Requests with Retry-After, Content-Type
// text/plain and a one-line body, or calls Config.Denied. Requests that
// match no rule pass untouched. Other answers: 500 for a negative cost
// (Config.Cost), 400 for a missing identity under EmptyKeyReject, 503 for a
// failed decision under FailClosed (the default; Result.Err is
// ErrTooManyKeys when a rule's table is full under
// shardlimit.RejectNewKeys, ErrClosed after Close).
//
// Client identities (KeyConfig.Header, Config.KeyFunc) are whatever the
// client sends. Use them as keys or to grant tiers only when they are
// authenticated upstream (API keys validated before this middleware): by
// default an identity that no tier or override lists is ignored and the
// request keyed by its address, so minting identities buys no budget
// (KeyConfig.UnknownIdentity).
//
// For a known client the middleware allocates twice per limited request,
// however many fields it writes: one string holding every field value and
// one array backing every field's []string (net/http header values must be
// strings).
//
// Paths are matched after cleaning (as http.ServeMux cleans them: "//foo"
// and "/a/../foo" match rules for "/foo"), so a router that does not clean
// paths cannot be used to slip past an exact-path rule.
//
//	rules, err := httpmw.LoadRules("rules.json")
//	mw, err := httpmw.New(httpmw.Config{Options: httpmw.Options{
//		Rules: rules,
//		Keys:  httpmw.KeyConfig{Header: "X-Client-ID"},
//	}})
//	defer mw.Close()
//	http.ListenAndServe(":8080", mw.Wrap(mux))
package httpmw

import (
	"net/http"
	"net/netip"
	"path"
	"strings"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/httplimit"
)

// Config configures a Middleware. The embedded Options are shared with
// package fasthttpmw; the hooks below receive the net/http request. Hooks
// run on the request's goroutine and must be safe for concurrent use.
type Config struct {
	Options

	// KeyFunc, if set, returns the client identity. An empty result is
	// treated per KeyConfig.EmptyKey, one that no tier or override lists
	// per KeyConfig.UnknownIdentity (by default like an empty one). It is
	// an error to set both KeyFunc and KeyConfig.Header.
	KeyFunc func(r *http.Request) string

	// Skip, if set and returning true, passes the request to next without
	// limiting it or writing any field.
	Skip func(r *http.Request) bool

	// Cost, if set, returns the request's cost in units (default 1). 0
	// passes without consuming anything (the fields show the current
	// state); a cost above the rule's limit is denied with 429 and no
	// Retry-After; a negative cost answers 500 Internal Server Error with a
	// text/plain body and consumes nothing.
	Cost func(r *http.Request) int

	// Denied, if set, answers denied requests instead of the default 429.
	// When it is called the rate-limit fields (including Retry-After) are
	// set on w.Header() but nothing is written: it must write the status
	// (usually http.StatusTooManyRequests) and body itself.
	Denied func(w http.ResponseWriter, r *http.Request, d Decision)
}

// Middleware limits requests to the handlers it wraps. All methods are safe
// for concurrent use; one Middleware may wrap any number of handlers, which
// then share its rules and counters.
type Middleware struct {
	e       *httplimit.Engine
	header  string
	keyFunc func(*http.Request) string
	skip    func(*http.Request) bool
	cost    func(*http.Request) int
	denied  func(http.ResponseWriter, *http.Request, Decision)
	clock   shardlimit.Clock
	fwd     string // the forwarding header believed from trusted proxies
}

// New validates cfg and returns a Middleware with cfg.Rules in force. Errors
// wrap shardlimit.ErrInvalidConfig. Close releases its limiters.
func New(cfg Config) (*Middleware, error) {
	e, err := httplimit.NewEngine(cfg.Options, cfg.KeyFunc != nil)
	if err != nil {
		return nil, err
	}
	return &Middleware{
		e:       e,
		header:  e.IdentityHeader(),
		keyFunc: cfg.KeyFunc,
		skip:    cfg.Skip,
		cost:    cfg.Cost,
		denied:  cfg.Denied,
		clock:   e.Clock(),
		fwd:     e.ForwardedHeader(),
	}, nil
}

// Wrap returns next limited by m: the decorator
// func(http.Handler) http.Handler.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
}

// Reload replaces the rules in force, keeping the counters of rules whose
// name, algorithm, window and buckets are unchanged. An invalid r returns an
// error wrapping shardlimit.ErrInvalidConfig and changes nothing.
func (m *Middleware) Reload(r *Rules) error { return m.e.Reload(r) }

// Stats returns the middleware's counters.
func (m *Middleware) Stats() Stats { return m.e.Stats() }

// RuleStats returns the limiter counters of each rule in force, by name.
func (m *Middleware) RuleStats() map[string]shardlimit.Stats { return m.e.RuleStats() }

// Close closes the rules' limiters and stops their janitors; afterwards
// requests are answered per Options.OnError. Idempotent; returns nil.
func (m *Middleware) Close() error { return m.e.Close() }

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if m.skip != nil && m.skip(r) {
		next.ServeHTTP(w, r)
		return
	}
	sc := m.e.GetScratch()
	var q httplimit.Request[string] // fields set one by one, as in fasthttpmw
	q.Method, q.Path, q.Cost = r.Method, cleanPath(r.URL.Path), 1
	peer := peerAddr(r.RemoteAddr)
	q.Client = peer
	if m.e.Trusts(peer) {
		q.Client = httplimit.ClientAddr(m.e, peer, r.Header[m.fwd])
	}
	switch {
	case m.header != "":
		q.Identity = first(r.Header[m.header])
	case m.keyFunc != nil:
		q.Identity = m.keyFunc(r)
	}
	if m.cost != nil {
		q.Cost = m.cost(r)
	}
	q.Now = m.clock.Now()
	var d httplimit.Decision
	httplimit.Decide(m.e, sc, &q, &d)
	switch d.Action() {
	case httplimit.ActionPass, httplimit.ActionErrorPass:
		m.e.PutScratch(sc)
		next.ServeHTTP(w, r)
		return
	case httplimit.ActionBadCost:
		m.e.PutScratch(sc)
		plain(w, http.StatusInternalServerError, httplimit.BodyBadCost)
		return
	case httplimit.ActionNoIdentity:
		m.e.PutScratch(sc)
		plain(w, http.StatusBadRequest, httplimit.BodyNoIdentity)
		return
	case httplimit.ActionError:
		m.e.PutScratch(sc)
		plain(w, http.StatusServiceUnavailable, httplimit.BodyUnavailable)
		return
	}
	var fs httplimit.Fields
	fs.Buf = sc.Val[:0]
	m.e.FormatFields(&fs, &d)
	sc.Val = fs.Buf
	h := w.Header()
	if d.Action() != httplimit.ActionDeny {
		setFields(h, &fs, 0)
		m.e.PutScratch(sc)
		next.ServeHTTP(w, r)
		return
	}
	if m.denied != nil {
		setFields(h, &fs, 0)
		m.e.PutScratch(sc)
		m.denied(w, r, d)
		return
	}
	// The 429's own fields share the rate-limit fields' allocation.
	own := setFields(h, &fs, 2)
	own[0], own[1] = httplimit.ContentType, "nosniff"
	h["Content-Type"], h["X-Content-Type-Options"] = own[0:1:1], own[1:2:2]
	body := httplimit.AppendDenyBody(sc.Val[:0], &d)
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(body) // the client may have gone; nothing to do
	sc.Val = body
	m.e.PutScratch(sc)
}

// plain answers with status and a text/plain body.
func plain(w http.ResponseWriter, status int, body string) {
	h := w.Header()
	h.Set("Content-Type", httplimit.ContentType)
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

// first returns vs[0], or "".
func first(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

// peerAddr parses http.Request.RemoteAddr ("ip:port", or a bare address as
// some test harnesses set it); the invalid Addr if it is neither.
func peerAddr(s string) netip.Addr { return httplimit.ParseRemoteAddr(s) }

// cleanPath returns p cleaned like http.ServeMux does (rooted, no "." or
// ".." elements, no repeated slashes, a trailing slash kept), allocating
// only when p is not clean already.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if isClean(p) {
		return p
	}
	np := path.Clean("/" + p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// isClean reports whether p is rooted and has no "." or ".." element and
// no repeated slash: in one pass, the cleanPath fast path that most
// requests take.
func isClean(p string) bool {
	if p[0] != '/' {
		return false
	}
	for i := 0; i < len(p); {
		j := strings.IndexByte(p[i+1:], '/') // p[i] is a slash
		elem := p[i+1:]
		if j >= 0 {
			elem = p[i+1 : i+1+j]
		}
		if j == 0 || elem == "." || elem == ".." {
			return false
		}
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return true
}

// setFields sets the fields fs in h, replacing any of the same names, and
// returns extra more value slots for the caller's own fields. It allocates
// twice whatever the number of fields: one string holding every value and
// one array backing every field's []string (each capped at one element, so
// a handler's Add to one field cannot overwrite the next).
func setFields(h http.Header, fs *httplimit.Fields, extra int) []string {
	n := fs.Len()
	if n+extra == 0 {
		return nil
	}
	all := string(fs.Buf)
	vals := make([]string, n+extra)
	start := 0
	for i := range n {
		end := fs.End(i)
		vals[i] = all[start:end]
		h[httplimit.FieldNames[fs.Field(i)]] = vals[i : i+1 : i+1]
		start = end
	}
	return vals[n:]
}
