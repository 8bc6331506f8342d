// Package fasthttpmw is shardlimit's rate-limiting middleware for
// github.com/valyala/fasthttp: a decorator func(next fasthttp.RequestHandler)
// fasthttp.RequestHandler that limits each client per route, with tiers,
// overrides, rules reloadable at runtime and the usual rate-limit headers.
// What it shares with package httpmw (the net/http middleware) lives in
// package httplimit: the Options every field of which is documented there,
// the rule sets and their JSON form (httplimit.LoadRules), the Decision
// given to hooks, and how requests are answered; Config adds the hooks that
// take a *fasthttp.RequestCtx.
//
//	rules, err := httplimit.LoadRules("rules.json")
//	if err != nil {
//		log.Fatal(err)
//	}
//	mw, err := fasthttpmw.New(fasthttpmw.Config{Options: httplimit.Options{
//		Rules:   rules,
//		Keys:    httplimit.KeyConfig{Header: "X-Client-ID"},
//		Headers: httplimit.HeaderConfig{IETF: true}, // adds RateLimit-Policy and RateLimit
//	}})
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer mw.Close()
//	log.Fatal(fasthttp.ListenAndServe("127.0.0.1:8080", mw.Wrap(handler)))
//
// Each request is matched to at most one enforced rule (and one shadow rule,
// which counts but never answers; exempt and deny lists come first: see
// Policies in package httplimit); its client key (address or
// identity, see httplimit.KeyConfig) is decided by that rule's
// shardlimit.Limiter at the middleware clock's now, read when the
// middleware runs: Options.Clock, else shardlimit.DefaultClock(), the
// limiters' Config.Clock, at which the process's janitor sweeps them. Not
// at ctx.Time(): that is the wall time fasthttp read when the request
// started, stale behind slow middleware in front and subject to wall-clock
// steps, which would let the janitor, sweeping at the limiters' clock,
// evict keys mid-window (see Options.Clock).
//
// The allowed path allocates nothing for a known client: the key is built in
// a pooled buffer, header values are formatted into it and copied into the
// response's reused header storage. A request settled after its handler
// (see "Settling after the handler" in package httplimit) allocates the
// client key as a string when the rule's limiter settles only string
// keys, nothing else. It reads the clock once per request;
// as it never calls ctx.Time(), a
// server whose handlers do not either can set
// fasthttp.Server.LazyRequestTime and skip the server's own time.Now per
// request.
package fasthttpmw

import (
	"net"
	"net/netip"

	"github.com/valyala/fasthttp"

	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwengine"
)

// Config configures a Middleware. The embedded httplimit.Options (rules,
// keys, response fields, algorithm, clock, error policy; see go doc
// httplimit.Options) are shared with package httpmw; the hooks below
// receive the fasthttp request. Hooks run on the request's goroutine and
// must be safe for concurrent use.
type Config struct {
	httplimit.Options

	// KeyFunc, if set, returns the client identity: either dst with the
	// identity appended (dst has room for httplimit.KeyConfig.MaxKeyBytes,
	// so this does not allocate) or a slice of request memory such as
	// ctx.Request.Header.Peek(...). The result must stay valid until the
	// handler returns; the middleware copies what it keeps. An empty
	// result is treated per KeyConfig.EmptyKey, one that no tier or
	// override lists per KeyConfig.UnknownIdentity (by default like an
	// empty one). It is an error to set both KeyFunc and KeyConfig.Header.
	KeyFunc func(ctx *fasthttp.RequestCtx, dst []byte) []byte

	// Skip, if set and returning true, passes the request to next without
	// limiting it or writing any field.
	Skip func(ctx *fasthttp.RequestCtx) bool

	// Cost, if set, returns the request's cost in units (default 1). 0
	// passes without consuming anything (the fields show the current
	// state); a cost above the rule's limit is denied with 429 and no
	// Retry-After; a negative cost answers 500 Internal Server Error with a
	// text/plain body and consumes nothing.
	Cost func(ctx *fasthttp.RequestCtx) int

	// Denied, if set, answers denied requests instead of the default 429
	// body. When it is called the rate-limit fields (including Retry-After)
	// are set and the status is 429; it may change anything. Clients on a
	// deny list are answered 403 by the middleware, not by Denied.
	Denied func(ctx *fasthttp.RequestCtx, d httplimit.Decision)

	// Tier, if set, names the tier of a request (a Tier.Name of the rules
	// in force) from something the application has verified, such as a
	// JWT claim its authentication checked and stored with
	// ctx.SetUserValue; "" leaves the tier to the identity and network
	// (Tier.Clients, Tier.Networks). It takes precedence over them. A name
	// the rules in force lack is counted (Stats.UnknownTier) and ignored.
	// It chooses rules, not keys: the key is built per KeyConfig as
	// always. Return a string that does not alias request memory (a
	// constant tier name does not allocate).
	Tier func(ctx *fasthttp.RequestCtx) string

	// ErrorStatus, if set, decides what a request whose decision failed
	// (err: shardlimit.ErrTooManyKeys, ErrClosed, a store's error)
	// answers, in place of Options.OnError: httplimit.ErrorPass (0) lets
	// it through to the next handler, as FailOpen; a status in [400, 599]
	// answers it with a text/plain body such as "503 Service Unavailable:
	// rate limiter unavailable." and no rate-limit field; any other value
	// answers 503 (see httplimit.ErrorStatusOf). Shadow rules' failures
	// never reach it.
	ErrorStatus func(ctx *fasthttp.RequestCtx, err error) int
	// FinalCost, if set, returns the final cost in units of an admitted
	// request once its handler has returned: ctx holds the response
	// (status, header), d the request's Decision (whose Cost is the cost
	// decided before the handler; return it to keep it). The difference
	// is settled with the rule's limiter: an overdraft or a refund (see
	// "Settling after the handler" in package httplimit). It is asked for
	// every request a rule admits, unless the response carries the rule's
	// CostHeader (whose value, if bad, is counted and ignored); a result
	// outside [0, shardlimit.MaxLimit] is ignored and counted in
	// SettleStats.BadReports. It is not called for a handler that
	// panicked.
	FinalCost func(ctx *fasthttp.RequestCtx, d httplimit.Decision) int
}

// Middleware limits requests to the handlers it wraps. All methods are safe
// for concurrent use; one Middleware may wrap any number of handlers, which
// then share its rules and counters.
type Middleware struct {
	e       *mwengine.Engine
	keyFunc func(*fasthttp.RequestCtx, []byte) []byte
	skip    func(*fasthttp.RequestCtx) bool
	cost    func(*fasthttp.RequestCtx) int
	denied  func(*fasthttp.RequestCtx, httplimit.Decision)
	tier    func(*fasthttp.RequestCtx) string
	errStat func(*fasthttp.RequestCtx, error) int

	finalCost func(*fasthttp.RequestCtx, httplimit.Decision) int
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
// func(next fasthttp.RequestHandler) fasthttp.RequestHandler.
//
// Wrap panics if m is nil or was not built by New (New returned an error
// that was ignored), so that such a server fails when it is set up rather
// than on its first request.
func (m *Middleware) Wrap(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	if m == nil || m.e == nil {
		panic("fasthttpmw: Wrap on a Middleware that New did not build (was New's error ignored?)")
	}
	return func(ctx *fasthttp.RequestCtx) { m.serve(ctx, next) }
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

func (m *Middleware) serve(ctx *fasthttp.RequestCtx, next fasthttp.RequestHandler) {
	if m.skip != nil && m.skip(ctx) {
		next(ctx)
		return
	}
	sc := m.e.GetScratch()
	// Fields are set one by one: a composite literal of this size is built
	// in a temporary and copied in 16-byte moves that read 8-byte stores,
	// which stalls store forwarding (pprof put 6% of the allowed path there).
	var q mwengine.Request[[]byte]
	q.Method, q.Path, q.Cost = ctx.Method(), ctx.Path(), 1
	peer := peerAddr(ctx)
	q.Client = peer
	if m.e.Trusts(peer) {
		q.Client = mwengine.ClientAddr(m.e, peer, ctx.Request.Header.PeekAll(m.e.ForwardedHeader()))
	}
	switch {
	case m.e.IdentityHeader() != "":
		q.Identity = ctx.Request.Header.Peek(m.e.IdentityHeader())
	case m.keyFunc != nil:
		// The result may alias request memory: never keep it in sc.
		q.Identity = m.keyFunc(ctx, sc.ID[:0])
	}
	if m.cost != nil {
		q.Cost = m.cost(ctx)
	}
	if m.tier != nil {
		q.Tier = m.tier(ctx)
	}
	q.Now = m.e.Clock().Now() // not ctx.Time(): see Options.Clock
	var o mwengine.Outcome
	mwengine.Decide(m.e, sc, &q, &o)
	if m.errStat != nil && o.Failed() {
		mwengine.SetErrorStatus(&o, m.errStat(ctx, o.Result.Err))
	}
	rp := m.e.Reply(sc, &o, m.denied != nil)
	h := &ctx.Response.Header
	setFields(h, &sc.Fields)
	switch {
	case rp.Next:
		if m.e.Settles(&o) {
			m.serveSettled(ctx, next, sc, &o)
			return
		}
		m.e.PutScratch(sc)
		if o.InFlight.Held() {
			m.serveHeld(ctx, next, o.InFlight)
			return
		}
		next(ctx)
	case rp.Hook:
		m.e.PutScratch(sc)
		ctx.SetStatusCode(fasthttp.StatusTooManyRequests)
		m.denied(ctx, o.Decision)
	default:
		ctx.SetStatusCode(rp.Status)
		h.SetContentTypeBytes(contentType)
		h.SetCanonical(nosniffKey, nosniff)
		ctx.SetBody(rp.Body) // copies
		m.e.PutScratch(sc)
	}
}

// peerAddr returns the TCP peer's address, or the invalid Addr for a peer
// that is not TCP (a Unix socket).
func peerAddr(ctx *fasthttp.RequestCtx) netip.Addr {
	if a, ok := ctx.RemoteAddr().(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	}
	return netip.Addr{}
}

// fieldKeys are mwengine.FieldNames as byte slices.
var fieldKeys = func() (k [mwengine.NumFields][]byte) {
	for i, name := range mwengine.FieldNames {
		k[i] = []byte(name)
	}
	return k
}()

// The fields of the answers the middleware writes itself, as byte slices
// (never modified).
var (
	contentType = []byte(mwengine.ContentType)
	nosniffKey  = []byte("X-Content-Type-Options")
	nosniff     = []byte(mwengine.NoSniff)
)

// setFields sets the fields fs in h, replacing any of the same names (a
// handler's, or an outer middleware's). SetCanonical copies each value into
// the header's reused storage and skips normalising the names, which are
// canonical already.
func setFields(h *fasthttp.ResponseHeader, fs *mwengine.Fields) {
	for i := range fs.Len() {
		h.SetCanonical(fieldKeys[fs.Field(i)], fs.Value(i))
	}
}
