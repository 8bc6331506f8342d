// Package fasthttpmw is shardlimit's rate-limiting middleware for
// github.com/valyala/fasthttp: a decorator func(next fasthttp.RequestHandler)
// fasthttp.RequestHandler that limits each client per route, with tiers,
// overrides, rules reloadable at runtime and the usual rate-limit headers.
//
// Each request is matched to at most one rule; its client key (address or
// identity, see KeyConfig) is decided by that rule's shardlimit.Limiter at
// the middleware clock's now, read when the middleware runs: Options.Clock,
// else a shardlimit.SystemClock which the limiters' janitors share. Not at
// ctx.Time(): that is the wall time fasthttp read when the request started,
// stale behind slow middleware in front and subject to wall-clock steps,
// which would let a janitor on another clock evict keys mid-window (see
// Options.Clock). For an admitted request the middleware writes the
// selected fields and calls next; for a denied one it answers 429 Too Many
// Requests with Retry-After, Content-Type text/plain and a one-line body,
// or calls Config.Denied. Requests that match no rule pass untouched.
// Other answers: 500 for a negative cost (Config.Cost), 400 for a missing
// identity under EmptyKeyReject, 503 for a failed decision under FailClosed
// (the default; Result.Err is ErrTooManyKeys when a rule's table is full
// under shardlimit.RejectNewKeys, ErrClosed after Close).
//
// Client identities (KeyConfig.Header, Config.KeyFunc) are whatever the
// client sends. Use them as keys or to grant tiers only when they are
// authenticated upstream (API keys validated before this middleware): by
// default an identity that no tier or override lists is ignored and the
// request keyed by its address, so minting identities buys no budget
// (KeyConfig.UnknownIdentity).
//
// The allowed path allocates nothing for a known client: the key is built in
// a pooled buffer, header values are formatted into it and copied into the
// response's reused header storage. It reads the clock once per request
// (one monotonic clock read with the default clock); as it never calls
// ctx.Time(), a server whose handlers do not either can set
// fasthttp.Server.LazyRequestTime and skip the server's own time.Now per
// request.
//
//	rules, err := fasthttpmw.LoadRules("rules.json")
//	mw, err := fasthttpmw.New(fasthttpmw.Config{Options: fasthttpmw.Options{
//		Rules: rules,
//		Keys:  fasthttpmw.KeyConfig{Header: "X-Client-ID"},
//	}})
//	defer mw.Close()
//	fasthttp.ListenAndServe(":8080", mw.Wrap(handler))
package fasthttpmw

import (
	"net"
	"net/netip"

	"github.com/valyala/fasthttp"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/httplimit"
)

// Config configures a Middleware. The embedded Options are shared with
// package httpmw; the hooks below receive the fasthttp request. Hooks run on
// the request's goroutine and must be safe for concurrent use.
type Config struct {
	Options

	// KeyFunc, if set, returns the client identity: either dst with the
	// identity appended (dst has room for KeyConfig.MaxKeyBytes, so this
	// does not allocate) or a slice of request memory such as
	// ctx.Request.Header.Peek(...). The result must stay valid until the
	// handler returns; the middleware copies what it keeps.
	// An empty result is treated per KeyConfig.EmptyKey, one that no tier
	// or override lists per KeyConfig.UnknownIdentity (by default like an
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
	// are set and the status is 429; it may change anything.
	Denied func(ctx *fasthttp.RequestCtx, d Decision)
}

// Middleware limits requests to the handlers it wraps. All methods are safe
// for concurrent use; one Middleware may wrap any number of handlers, which
// then share its rules and counters.
type Middleware struct {
	e       *httplimit.Engine
	header  string
	keyFunc func(*fasthttp.RequestCtx, []byte) []byte
	skip    func(*fasthttp.RequestCtx) bool
	cost    func(*fasthttp.RequestCtx) int
	denied  func(*fasthttp.RequestCtx, Decision)
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
// func(next fasthttp.RequestHandler) fasthttp.RequestHandler.
func (m *Middleware) Wrap(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) { m.serve(ctx, next) }
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

func (m *Middleware) serve(ctx *fasthttp.RequestCtx, next fasthttp.RequestHandler) {
	if m.skip != nil && m.skip(ctx) {
		next(ctx)
		return
	}
	sc := m.e.GetScratch()
	// Fields are set one by one: a composite literal of this size is built
	// in a temporary and copied in 16-byte moves that read 8-byte stores,
	// which stalls store forwarding (pprof put 6% of the allowed path there).
	var q httplimit.Request[[]byte]
	q.Method, q.Path, q.Cost = ctx.Method(), ctx.Path(), 1
	peer := peerAddr(ctx)
	q.Client = peer
	if m.e.Trusts(peer) {
		q.Client = httplimit.ClientAddr(m.e, peer, ctx.Request.Header.PeekAll(m.fwd))
	}
	switch {
	case m.header != "":
		q.Identity = ctx.Request.Header.Peek(m.header)
	case m.keyFunc != nil:
		// The result may alias request memory: never keep it in sc.
		q.Identity = m.keyFunc(ctx, sc.ID[:0])
	}
	if m.cost != nil {
		q.Cost = m.cost(ctx)
	}
	q.Now = m.clock.Now() // not ctx.Time(): see Options.Clock
	var d httplimit.Decision
	httplimit.Decide(m.e, sc, &q, &d)
	switch d.Action() {
	case httplimit.ActionPass, httplimit.ActionErrorPass:
		m.e.PutScratch(sc)
		next(ctx)
		return
	case httplimit.ActionBadCost:
		m.e.PutScratch(sc)
		m.plain(ctx, fasthttp.StatusInternalServerError, httplimit.BodyBadCost)
		return
	case httplimit.ActionNoIdentity:
		m.e.PutScratch(sc)
		m.plain(ctx, fasthttp.StatusBadRequest, httplimit.BodyNoIdentity)
		return
	case httplimit.ActionError:
		m.e.PutScratch(sc)
		m.plain(ctx, fasthttp.StatusServiceUnavailable, httplimit.BodyUnavailable)
		return
	}
	var fs httplimit.Fields
	fs.Buf = sc.Val[:0]
	m.e.FormatFields(&fs, &d)
	setFields(&ctx.Response.Header, &fs)
	sc.Val = fs.Buf
	if d.Action() != httplimit.ActionDeny {
		m.e.PutScratch(sc)
		next(ctx)
		return
	}
	ctx.SetStatusCode(fasthttp.StatusTooManyRequests)
	if m.denied != nil {
		m.e.PutScratch(sc)
		m.denied(ctx, d)
		return
	}
	ctx.SetContentType(httplimit.ContentType)
	sc.Val = httplimit.AppendDenyBody(sc.Val[:0], &d)
	ctx.SetBody(sc.Val)
	m.e.PutScratch(sc)
}

// plain answers with status and a text/plain body.
func (m *Middleware) plain(ctx *fasthttp.RequestCtx, status int, body string) {
	ctx.SetStatusCode(status)
	ctx.SetContentType(httplimit.ContentType)
	ctx.SetBodyString(body)
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

// fieldKeys are httplimit.FieldNames as byte slices.
var fieldKeys = func() (k [httplimit.NumFields][]byte) {
	for i, name := range httplimit.FieldNames {
		k[i] = []byte(name)
	}
	return k
}()

// setFields sets the fields fs in h, replacing any of the same names (a
// handler's, or an outer middleware's). SetCanonical copies each value into
// the header's reused storage and skips normalising the names, which are
// canonical already.
func setFields(h *fasthttp.ResponseHeader, fs *httplimit.Fields) {
	for i := range fs.Len() {
		h.SetCanonical(fieldKeys[fs.Field(i)], fs.Value(i))
	}
}
