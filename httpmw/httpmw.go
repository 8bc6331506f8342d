// Package httpmw is shardlimit's rate-limiting middleware for net/http: a
// decorator func(http.Handler) http.Handler that limits each client per
// route, with tiers, overrides, rules reloadable at runtime and the usual
// rate-limit headers. What it shares with package fasthttpmw lives in
// package httplimit: the Options every field of which is documented there,
// the rule sets and their JSON form (httplimit.LoadRules), the Decision
// given to hooks, and how requests are answered; Config adds the hooks that
// take an *http.Request.
//
//	rules, err := httplimit.LoadRules("rules.json")
//	if err != nil {
//		log.Fatal(err)
//	}
//	mw, err := httpmw.New(httpmw.Config{Options: httplimit.Options{
//		Rules:   rules,
//		Keys:    httplimit.KeyConfig{Header: "X-Client-ID"},
//		Headers: httplimit.HeaderConfig{IETF: true}, // adds RateLimit-Policy and RateLimit
//	}})
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer mw.Close()
//	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mw.Wrap(mux)))
//
// Each request is matched to at most one enforced rule (and one shadow rule,
// which counts but never answers; exempt and deny lists come first: see
// Policies in package httplimit); its client key (address or
// identity, see httplimit.KeyConfig) is decided by that rule's
// shardlimit.Limiter at the middleware clock's now, read when the
// middleware runs: Options.Clock, else shardlimit.DefaultClock(), the
// limiters' Config.Clock, at which the process's janitor sweeps them, so
// decisions and evictions agree and wall-clock steps do not matter (see
// Options.Clock).
//
// For a known client the middleware allocates twice per limited request,
// however many fields it writes: one string holding every field value and
// one array backing every field's []string (net/http header values must be
// strings, and the varying ones cannot be cached). A request settled
// after its handler (see "Settling after the handler" in package
// httplimit) allocates one more, the writer that records the response's
// status and takes out the cost header, and one more again, the client
// key as a string, when the rule's limiter settles only string keys.
// That writer implements http.Flusher and Unwrap (so
// http.ResponseController reaches the server's writer), not io.ReaderFrom:
// io.Copy into it does not use sendfile.
//
// Paths are matched after cleaning (as http.ServeMux cleans them: "//foo"
// and "/a/../foo" match rules for "/foo"), so a router that does not clean
// paths cannot be used to slip past an exact-path rule.
package httpmw

import (
	"net/http"
	"net/netip"
	"path"
	"strings"

	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwengine"
)

// Config configures a Middleware. The embedded httplimit.Options (rules,
// keys, response fields, algorithm, clock, error policy; see go doc
// httplimit.Options) are shared with package fasthttpmw; the hooks below
// receive the net/http request. Hooks run on the request's goroutine and
// must be safe for concurrent use.
type Config struct {
	httplimit.Options

	// KeyFunc, if set, returns the client identity. An empty result is
	// treated per httplimit.KeyConfig.EmptyKey, one that no tier or
	// override lists per KeyConfig.UnknownIdentity (by default like an
	// empty one). It is an error to set both KeyFunc and KeyConfig.Header.
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
	// (usually http.StatusTooManyRequests) and body itself. Clients on a
	// deny list are answered 403 by the middleware, not by Denied.
	Denied func(w http.ResponseWriter, r *http.Request, d httplimit.Decision)

	// Tier, if set, names the tier of a request (a Tier.Name of the rules
	// in force) from something the application has verified, such as a
	// JWT claim its authentication checked and put in r.Context(); ""
	// leaves the tier to the identity and network (Tier.Clients,
	// Tier.Networks). It takes precedence over them. A name the rules in
	// force lack is counted (Stats.UnknownTier) and ignored. It chooses
	// rules, not keys: the key is built per KeyConfig as always.
	Tier func(r *http.Request) string

	// ErrorStatus, if set, decides what a request whose decision failed
	// (err: shardlimit.ErrTooManyKeys, ErrClosed, a store's error)
	// answers, in place of Options.OnError: httplimit.ErrorPass (0) lets
	// it through to the next handler, as FailOpen; a status in [400, 599]
	// answers it with a text/plain body such as "503 Service Unavailable:
	// rate limiter unavailable." and no rate-limit field; any other value
	// answers 503 (see httplimit.ErrorStatusOf). Shadow rules' failures
	// never reach it.
	ErrorStatus func(r *http.Request, err error) int
	// FinalCost, if set, returns the final cost in units of an admitted
	// request once its handler has returned, given the response's status
	// and header and the request's Decision (whose Cost is the cost
	// decided before the handler; return it to keep it). The difference
	// is settled with the rule's limiter: an overdraft or a refund (see
	// "Settling after the handler" in package httplimit). It is asked for
	// every request a rule admits, unless the response carries the rule's
	// CostHeader (whose value, if bad, is counted and ignored); a result
	// outside [0, shardlimit.MaxLimit] is ignored and counted in
	// SettleStats.BadReports. It is not called for a handler that
	// panicked.
	FinalCost func(r *http.Request, status int, h http.Header, d httplimit.Decision) int
}

// Middleware limits requests to the handlers it wraps. All methods are safe
// for concurrent use; one Middleware may wrap any number of handlers, which
// then share its rules and counters.
type Middleware struct {
	e       *mwengine.Engine
	keyFunc func(*http.Request) string
	skip    func(*http.Request) bool
	cost    func(*http.Request) int
	denied  func(http.ResponseWriter, *http.Request, httplimit.Decision)
	tier    func(*http.Request) string
	errStat func(*http.Request, error) int

	finalCost finalCostHook
}

// New validates cfg (see httplimit.Options.Validate) and returns a
// Middleware with cfg.Rules in force. Errors wrap
// shardlimit.ErrInvalidConfig; nil Rules, or rules without a single rule
// that do not say limiting is off, wrap httplimit.ErrNoRules too. Close
// releases its limiters.
func New(cfg Config) (*Middleware, error) {
	e, err := mwengine.New(cfg.Options, cfg.KeyFunc != nil)
	if err != nil {
		return nil, err
	}
	m := &Middleware{
		e:       e,
		keyFunc: cfg.KeyFunc,
		skip:    cfg.Skip,
		cost:    cfg.Cost,
		denied:  cfg.Denied,
		tier:    cfg.Tier,
		errStat: cfg.ErrorStatus,
	}
	m.setFinalCost(cfg.FinalCost)
	return m, nil
}

// Wrap returns next limited by m: the decorator
// func(http.Handler) http.Handler.
//
// Wrap panics if m is nil or was not built by New (New returned an error
// that was ignored), so that such a server fails when it is set up rather
// than on its first request.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	if m == nil || m.e == nil {
		panic("httpmw: Wrap on a Middleware that New did not build (was New's error ignored?)")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
}

// Reload replaces the rules in force by r, atomically for requests, keeping
// the counters of rules whose name, algorithm, window and buckets are
// unchanged and of rules that come back (see "Reloading rules" in package
// httplimit). An invalid r, or one without rules that does not say
// limiting is off, returns an error wrapping shardlimit.ErrInvalidConfig
// and changes nothing. Reload after Close returns shardlimit.ErrClosed.
func (m *Middleware) Reload(r *httplimit.Rules) error { return m.e.Reload(r) }

// Stats returns the middleware's counters.
func (m *Middleware) Stats() httplimit.Stats { return m.e.Stats() }

// RuleStats returns each rule in force, by name, with its limiter's
// counters and its failed decisions by cause (see httplimit.RuleStats).
func (m *Middleware) RuleStats() []httplimit.RuleStats { return m.e.RuleStats() }

// TopDenied returns up to n of the most-denied (rule, client key) pairs
// since m was built, most denied first by guaranteed count (n <= 0: all
// that are listed, at most Options.TopDenied), and the number of denials
// counted in all: the clients being limited. The counts are those of a
// fixed-size Space-Saving summary: each is at least the pair's true number
// of denials and at most its Error more, and only pairs certainly denied
// more often than any pair outside the full list (n <= 0) are listed (see
// httplimit.DeniedKey).
// Nil if Options.TopDenied is negative.
func (m *Middleware) TopDenied(n int) ([]httplimit.DeniedKey, uint64) { return m.e.TopDenied(n) }

// Close closes the rules' limiters, taking them off the janitor; afterwards
// requests are answered per Options.OnError. Idempotent; returns nil.
func (m *Middleware) Close() error { return m.e.Close() }

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if m.skip != nil && m.skip(r) {
		next.ServeHTTP(w, r)
		return
	}
	sc := m.e.GetScratch()
	var q mwengine.Request[string] // fields set one by one, as in fasthttpmw
	q.Method, q.Path, q.Cost = r.Method, cleanPath(r.URL.Path), 1
	peer := peerAddr(r.RemoteAddr)
	q.Client = peer
	if m.e.Trusts(peer) {
		q.Client = mwengine.ClientAddr(m.e, peer, r.Header[m.e.ForwardedHeader()])
	}
	switch {
	case m.e.IdentityHeader() != "":
		q.Identity = first(r.Header[m.e.IdentityHeader()])
	case m.keyFunc != nil:
		q.Identity = m.keyFunc(r)
	}
	if m.cost != nil {
		q.Cost = m.cost(r)
	}
	if m.tier != nil {
		q.Tier = m.tier(r)
	}
	q.Now = m.e.Clock().Now()
	var o mwengine.Outcome
	mwengine.Decide(m.e, sc, &q, &o)
	if m.errStat != nil && o.Failed() {
		mwengine.SetErrorStatus(&o, m.errStat(r, o.Result.Err))
	}
	rp := m.e.Reply(sc, &o, m.denied != nil)
	h := w.Header()
	switch {
	case rp.Next:
		setFields(h, &sc.Fields, 0)
		if m.e.Settles(&o) {
			m.serveSettled(w, r, next, sc, &o)
			return
		}
		m.e.PutScratch(sc)
		if o.InFlight.Held() {
			m.serveHeld(w, r, next, o.InFlight)
			return
		}
		next.ServeHTTP(w, r)
	case rp.Hook:
		setFields(h, &sc.Fields, 0)
		m.e.PutScratch(sc)
		m.denied(w, r, o.Decision)
	default:
		// The answer's own fields share the rate-limit fields' allocation.
		own := setFields(h, &sc.Fields, 2)
		own[0], own[1] = mwengine.ContentType, mwengine.NoSniff
		h["Content-Type"], h["X-Content-Type-Options"] = own[0:1:1], own[1:2:2]
		w.WriteHeader(rp.Status)
		_, _ = w.Write(rp.Body) // the client may have gone; nothing to do
		m.e.PutScratch(sc)
	}
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
func peerAddr(s string) netip.Addr { return mwengine.ParseRemoteAddr(s) }

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
func setFields(h http.Header, fs *mwengine.Fields, extra int) []string {
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
		h[mwengine.FieldNames[fs.Field(i)]] = vals[i : i+1 : i+1]
		start = end
	}
	return vals[n:]
}
