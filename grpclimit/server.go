package grpclimit

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwengine"
)

// Method is the request method every call is matched as: gRPC sends each
// call as an HTTP/2 POST, so a rule listing Methods matches calls only if
// it lists "POST".
const Method = "POST"

// ServerConfig configures a Server. The embedded httplimit.Options (rules,
// keys, fields, algorithm, clock, dry run, error policy, bans; see go doc
// httplimit.Options) are those of the HTTP middleware, read the gRPC way:
//
//   - A rule's Path or Prefix is matched against the call's full method,
//     "/pkg.Service/Method": Path "/pkg.Service/Method" limits one method,
//     Prefix "/pkg.Service/" every method of a service.
//   - Keys.Header names a request metadata key holding the client identity
//     (matched lower-cased, as gRPC sends every key), such as "x-api-key".
//   - The client address is the peer's (per /32 and /64 by default); from
//     a peer in Keys.TrustedProxies the "x-forwarded-for" (or
//     "x-real-ip", per Keys.ForwardedHeader) metadata is read.
//   - A rule's CostHeader is refused (New and Reload return an error
//     wrapping shardlimit.ErrInvalidConfig): a gRPC handler reports a final
//     cost with FinalCost. Rule.Count is judged by the HTTP status a
//     call's gRPC code maps to (HTTPStatus), which
//     Options.FailedResponse receives.
//
// Hooks run on the call's goroutine and must be safe for concurrent use;
// each receives the call's context and full method.
type ServerConfig struct {
	httplimit.Options

	// KeyFunc, if set, returns the client identity, as the metadata key
	// Keys.Header would (it is an error to set both). An empty result is
	// treated per KeyConfig.EmptyKey; one no tier or override lists per
	// KeyConfig.UnknownIdentity.
	KeyFunc func(ctx context.Context, fullMethod string) string

	// Skip, if set and returning true, passes the call on without
	// limiting it or sending any field.
	Skip func(ctx context.Context, fullMethod string) bool

	// Cost, if set, returns the call's cost in units (default 1), and with
	// PerMessage each received message's. 0 passes without consuming
	// anything; a cost above the rule's limit is refused with
	// codes.ResourceExhausted and no RetryInfo; a negative cost is refused
	// with codes.Internal and consumes nothing.
	Cost func(ctx context.Context, fullMethod string) int

	// Tier, if set, names the call's tier (a Tier.Name of the rules in
	// force) from something the application verified (a token's claim);
	// "" leaves it to the identity and address. See httpmw.Config.Tier.
	Tier func(ctx context.Context, fullMethod string) string

	// FinalCost, if set, returns the final cost in units of an admitted
	// unary call once its handler has returned, given the handler's error
	// (nil for success) and the call's Decision (whose Cost is the cost
	// decided; return it to keep it). The difference is settled with the
	// rule's limiter (see "Settling after the handler" in package
	// httplimit). A result outside [0, shardlimit.MaxLimit] is ignored and
	// counted in SettleStats.BadReports. It is not called for a handler
	// that panicked, which is settled as a call that failed with
	// codes.Internal. Streams are settled by Rule.Count alone.
	FinalCost func(ctx context.Context, fullMethod string, err error, d httplimit.Decision) int

	// Denied, if set, returns the error a call denied by its limit or a
	// ban gets (d its decision, st the status it would get otherwise, see
	// UnaryServerInterceptor), for example st with details of the
	// application's own; nil means st. The fields are sent as header
	// metadata either way. It is not asked for other refusals (deny
	// lists, concurrency limits, missing identities, failed decisions),
	// nor by Limiter.
	Denied func(ctx context.Context, fullMethod string, d httplimit.Decision, st *status.Status) error

	// ErrorCode, if set, decides what a call whose decision failed (err:
	// shardlimit.ErrTooManyKeys, ErrClosed, a store's error) gets, in
	// place of Options.OnError: codes.OK lets it through to the handler,
	// as FailOpen; any other code refuses it with that code and the
	// message "Service Unavailable: rate limiter unavailable.". Shadow
	// rules' failures never reach it.
	ErrorCode func(ctx context.Context, fullMethod string, err error) codes.Code

	// PerMessage, if true, decides every message a client sends on a
	// stream too, on the stream's rule and key, at the cost Cost returns
	// (1 by default): a message refused makes RecvMsg return the refusal
	// (codes.ResourceExhausted with RetryInfo and QuotaFailure, no
	// metadata: the stream's header is usually sent by then), which a
	// handler that returns RecvMsg's errors passes to the client, ending
	// the stream. The message itself is received (so the stream stays in
	// step), into RecvMsg's argument, but RecvMsg returns the refusal, so
	// a generated Recv returns no message. The stream's opening is
	// decided as always.
	// A message is never settled (it counts at its cost whatever the
	// rule's Count) and neither takes nor is refused a Concurrency slot
	// (its stream holds one).
	// Unary calls are one message and are decided once; a
	// server-streaming call, whose one request message is decided beside
	// its opening, counts twice. Default false.
	PerMessage bool
}

// Server is a gRPC server rate limiter: its UnaryServerInterceptor and
// StreamServerInterceptor limit each call by the rules, as the HTTP
// middleware (package httpmw) limits requests, on the same engine, and
// Limiter adapts it to go-grpc-middleware's ratelimit.Limiter. All methods
// are safe for concurrent use.
type Server struct {
	e       *mwengine.Engine
	idKey   string // lower-case metadata key of the identity, or ""
	fwdKey  string // lower-case metadata key of the forwarding field
	names   [mwengine.NumFields]string
	keyFunc func(context.Context, string) string
	skip    func(context.Context, string) bool
	cost    func(context.Context, string) int
	tier    func(context.Context, string) string
	final   func(context.Context, string, error, httplimit.Decision) int
	errCode func(context.Context, string, error) codes.Code
	denied  func(context.Context, string, httplimit.Decision, *status.Status) error
	perMsg  bool
}

// NewServer validates cfg (see httplimit.Options.Validate) and returns a
// Server with cfg.Rules in force. Errors wrap shardlimit.ErrInvalidConfig;
// nil Rules, or rules without a rule that do not say limiting is off,
// wrap httplimit.ErrNoRules too. Close releases its limiters.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := checkRules(cfg.Rules); err != nil {
		return nil, err
	}
	e, err := mwengine.New(cfg.Options, cfg.KeyFunc != nil)
	if err != nil {
		return nil, err
	}
	s := &Server{
		e:       e,
		idKey:   strings.ToLower(e.IdentityHeader()),
		fwdKey:  strings.ToLower(e.ForwardedHeader()),
		keyFunc: cfg.KeyFunc, skip: cfg.Skip, cost: cfg.Cost, tier: cfg.Tier,
		final: cfg.FinalCost, errCode: cfg.ErrorCode, denied: cfg.Denied, perMsg: cfg.PerMessage,
	}
	for i, n := range mwengine.FieldNames {
		s.names[i] = strings.ToLower(n)
	}
	if s.final != nil {
		e.EnableCostHook()
	}
	return s, nil
}

// checkRules refuses rules that name a cost header, which gRPC calls do
// not have.
func checkRules(r *httplimit.Rules) error {
	if r == nil {
		return nil // Validate reports it
	}
	check := func(rs []httplimit.Rule) error {
		for _, ru := range rs {
			if ru.CostHeader != "" {
				return fmt.Errorf("%w: rule %q: grpclimit reads no cost header (use ServerConfig.FinalCost)", shardlimit.ErrInvalidConfig, ru.Name)
			}
		}
		return nil
	}
	if err := check(r.Rules); err != nil {
		return err
	}
	for _, t := range r.Tiers {
		if err := check(t.Rules); err != nil {
			return err
		}
	}
	return nil
}

// Reload replaces the rules in force by r, atomically for calls, keeping
// the counters of rules whose name, algorithm, windows and buckets are
// unchanged (see "Reloading rules" in package httplimit). An invalid r
// returns an error wrapping shardlimit.ErrInvalidConfig and changes
// nothing. Reload after Close returns shardlimit.ErrClosed.
func (s *Server) Reload(r *httplimit.Rules) error {
	if err := checkRules(r); err != nil {
		return err
	}
	return s.e.Reload(r)
}

// Stats returns the server's counters.
func (s *Server) Stats() httplimit.Stats { return s.e.Stats() }

// RuleStats returns each rule in force, by name, with its limiter's
// counters (see httplimit.RuleStats). With it a Server is a
// metrics.HTTPMiddleware, for package metrics and the exporters.
func (s *Server) RuleStats() []httplimit.RuleStats { return s.e.RuleStats() }

// TopDenied returns up to n of the most-denied (rule, client key) pairs
// and the number of denials counted in all, as httpmw.Middleware.TopDenied
// does.
func (s *Server) TopDenied(n int) ([]httplimit.DeniedKey, uint64) { return s.e.TopDenied(n) }

// Bans returns the bans in force (httplimit.Ban), with the time each has
// left on the server's clock.
func (s *Server) Bans() []httplimit.BanEntry { return s.e.Bans() }

// SetBan bans client key ("ip:192.0.2.1", "id:client-1") on the rule named
// rule for d, as httpmw.Middleware.SetBan does; its errors wrap
// shardlimit.ErrInvalidConfig or shardlimit.ErrTooManyKeys, or are
// shardlimit.ErrClosed.
func (s *Server) SetBan(rule, key string, d time.Duration) error { return s.e.SetBan(rule, key, d) }

// LiftBan ends the ban of client key on the rule named rule and reports
// whether one was in force, as httpmw.Middleware.LiftBan does.
func (s *Server) LiftBan(rule, key string) (bool, error) { return s.e.LiftBan(rule, key) }

// PolicyStats returns the counters of bans and concurrency limits.
func (s *Server) PolicyStats() httplimit.PolicyStats { return s.e.PolicyStats() }

// InFlight returns the number of calls client key has in flight on the
// rule named rule (Rule.Concurrency).
func (s *Server) InFlight(rule, key string) int { return s.e.InFlightCount(rule, key) }

// Close closes the rules' limiters; afterwards calls are answered per
// Options.OnError (codes.Unavailable by default). Idempotent; returns nil.
func (s *Server) Close() error { return s.e.Close() }

// decide decides one call (or, with PerMessage, one message of a stream,
// which holds the stream's in-flight slot: msg) to fullMethod into o with
// sc, and returns how to answer it: the reply, and the code of a failed
// decision refused (ErrorCode's, else codes.Unavailable). For a known
// client on the allowed path it allocates only the copy grpc-go makes of
// a metadata key's values, when it reads one (the identity key, a trusted
// proxy's forwarding key).
func (s *Server) decide(ctx context.Context, fullMethod string, msg bool, sc *mwengine.Scratch, o *mwengine.Outcome) (mwengine.Reply, codes.Code) {
	var q mwengine.Request[string]
	q.Method, q.Path, q.Cost, q.SlotHeld = Method, fullMethod, 1, msg
	if p, ok := peer.FromContext(ctx); ok {
		q.Client = peerAddr(p.Addr)
	}
	if s.e.Trusts(q.Client) {
		q.Client = mwengine.ClientAddr(s.e, q.Client, metadata.ValueFromIncomingContext(ctx, s.fwdKey))
	}
	switch {
	case s.idKey != "":
		q.Identity = first(metadata.ValueFromIncomingContext(ctx, s.idKey))
	case s.keyFunc != nil:
		q.Identity = s.keyFunc(ctx, fullMethod)
	}
	if s.cost != nil {
		q.Cost = s.cost(ctx, fullMethod)
	}
	if s.tier != nil {
		q.Tier = s.tier(ctx, fullMethod)
	}
	q.Now = s.e.Clock().Now()
	mwengine.Decide(s.e, sc, &q, o)
	fail := codes.Unavailable
	if s.errCode != nil && o.Failed() {
		if fail = s.errCode(ctx, fullMethod, o.Result.Err); fail == codes.OK {
			mwengine.SetErrorStatus(o, httplimit.ErrorPass)
		} else {
			mwengine.SetErrorStatus(o, mwengine.StatusServiceUnavailable)
		}
	}
	return s.e.Reply(sc, o, false), fail
}

// headerSetter is what sends a call's response header metadata:
// grpc.ServerTransportStream (unary calls) and grpc.ServerStream.
type headerSetter interface {
	SetHeader(metadata.MD) error
}

// UnaryServerInterceptor returns the interceptor that limits unary calls.
// An admitted call gets the rate-limit fields as header metadata (see the
// package documentation) and goes on to the handler. A refused one gets
// the fields too, and a status error:
//
//   - denied by its limit, or banned: codes.ResourceExhausted with the
//     details google.rpc.RetryInfo (retry_delay: the limiter's exact wait
//     until the same call would be admitted; absent when no wait can
//     succeed, a limit of 0 or a cost above the limit) and
//     google.rpc.QuotaFailure (one violation: subject the rule's name and
//     the kind of client key, "rule:svc client:identity" (identity,
//     address or shared), never the key itself, which may be a secret
//     API key; description what happened);
//   - over its rule's Concurrency: codes.ResourceExhausted, or
//     codes.Unavailable for a Concurrency.Status of 503, with RetryInfo
//     (the rule's RetryAfter) and QuotaFailure;
//   - on a deny list: codes.PermissionDenied;
//   - without a required identity (EmptyKeyReject): codes.Unauthenticated;
//   - a negative cost: codes.Internal;
//   - a failed decision refused (FailClosed): codes.Unavailable, or the
//     code ServerConfig.ErrorCode chose.
//
// The message is the HTTP middleware's body, such as "Too Many Requests:
// limit of 10 per 60 s reached; retry in 57 s.".
func (s *Server) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if s.skip != nil && s.skip(ctx, info.FullMethod) {
			return handler(ctx, req)
		}
		sc := s.e.GetScratch()
		var o mwengine.Outcome
		rp, fail := s.decide(ctx, info.FullMethod, false, sc, &o)
		hs := grpc.ServerTransportStreamFromContext(ctx)
		s.sendFields(hs, &sc.Fields)
		if !rp.Next {
			err := s.refuse(ctx, info.FullMethod, &o, sc, rp, fail)
			s.e.PutScratch(sc)
			return nil, err
		}
		defer s.e.Release(o.InFlight) // by a panic too, after the settlement
		if !s.e.Settles(&o) {
			s.e.PutScratch(sc)
			return handler(ctx, req)
		}
		returned := false
		defer s.settlePanicked(sc, &o, &returned)
		resp, err := handler(ctx, req)
		returned = true
		cost := mwengine.NoCost
		if s.final != nil {
			cost = mwengine.CheckCost(s.final(ctx, info.FullMethod, err, o.Decision))
		}
		s.e.Settle(sc, &o, HTTPStatus(err), cost)
		s.e.PutScratch(sc)
		return resp, err
	}
}

// settlePanicked, deferred by an interceptor that settles the admitted
// call o decided with sc, settles it as a failed call (codes.Internal,
// without a final cost) if its handler panicked (returned still false),
// as the HTTP middleware settles a panic as a 500; the panic goes on
// untouched.
func (s *Server) settlePanicked(sc *mwengine.Scratch, o *mwengine.Outcome, returned *bool) {
	if !*returned {
		s.e.Settle(sc, o, httpStatusOf(codes.Internal), mwengine.NoCost)
		s.e.PutScratch(sc)
	}
}

// StreamServerInterceptor returns the interceptor that limits streams when
// they open (and each received message with ServerConfig.PerMessage): an
// admitted stream gets the rate-limit fields as header metadata and goes
// on to the handler; a refused one ends with the fields and the status
// error UnaryServerInterceptor describes.
func (s *Server) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		if s.skip != nil && s.skip(ctx, info.FullMethod) {
			return handler(srv, ss)
		}
		sc := s.e.GetScratch()
		var o mwengine.Outcome
		rp, fail := s.decide(ctx, info.FullMethod, false, sc, &o)
		s.sendFields(ss, &sc.Fields)
		if !rp.Next {
			err := s.refuse(ctx, info.FullMethod, &o, sc, rp, fail)
			s.e.PutScratch(sc)
			return err
		}
		defer s.e.Release(o.InFlight) // by a panic too, after the settlement
		if s.perMsg {
			ss = &messageStream{ServerStream: ss, s: s, method: info.FullMethod}
		}
		if !s.e.Settles(&o) {
			s.e.PutScratch(sc)
			return handler(srv, ss)
		}
		returned := false
		defer s.settlePanicked(sc, &o, &returned)
		err := handler(srv, ss)
		returned = true
		s.e.Settle(sc, &o, HTTPStatus(err), mwengine.NoCost)
		s.e.PutScratch(sc)
		return err
	}
}

// refuse returns the error of a refused call: refusal's, or for a call
// denied by its limit or a ban the Denied hook's.
func (s *Server) refuse(ctx context.Context, fullMethod string, o *mwengine.Outcome, sc *mwengine.Scratch, rp mwengine.Reply, fail codes.Code) error {
	err := refusal(o, sc, rp, fail)
	if s.denied == nil || o.Action != httplimit.ActionDeny && o.Action != httplimit.ActionBanned {
		return err
	}
	st, _ := status.FromError(err)
	if herr := s.denied(ctx, fullMethod, o.Decision, st); herr != nil {
		return herr
	}
	return err
}

// messageStream decides each message received on a stream (PerMessage).
type messageStream struct {
	grpc.ServerStream
	s      *Server
	method string
}

// RecvMsg receives the next message into msg and decides it: a denied
// message's refusal is returned (msg is filled all the same).
func (m *messageStream) RecvMsg(msg any) error {
	if err := m.ServerStream.RecvMsg(msg); err != nil {
		return err
	}
	s := m.s
	sc := s.e.GetScratch()
	var o mwengine.Outcome
	rp, fail := s.decide(m.ServerStream.Context(), m.method, true, sc, &o)
	var err error
	if !rp.Next {
		err = s.refuse(m.ServerStream.Context(), m.method, &o, sc, rp, fail)
	}
	s.e.PutScratch(sc)
	return err
}

// sendFields sends the rate-limit fields fs as header metadata, under
// their names in lower case, with four allocations (one string for every
// value, one array for every value's slice, the map's header and group);
// nothing if fs is
// empty or hs is nil. A failure to set them (the header was sent already)
// is ignored: the call is decided either way.
func (s *Server) sendFields(hs headerSetter, fs *mwengine.Fields) {
	n := fs.Len()
	if n == 0 || hs == nil {
		return
	}
	_ = hs.SetHeader(s.fieldsMD(fs))
}

// fieldsMD returns fs as metadata.
func (s *Server) fieldsMD(fs *mwengine.Fields) metadata.MD {
	n := fs.Len()
	all := string(fs.Buf)
	vals := make([]string, n)
	md := make(metadata.MD, n)
	start := 0
	for i := range n {
		end := fs.End(i)
		vals[i] = all[start:end]
		md[s.names[fs.Field(i)]] = vals[i : i+1 : i+1]
		start = end
	}
	return md
}

// first returns vs[0], or "".
func first(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

// peerAddr returns the address of a gRPC peer: a TCP or UDP address
// without allocating, another net.Addr whose String is "ip:port" or an
// address; the invalid Addr otherwise (a Unix socket, an in-memory
// connection), which keys its calls in the shared bucket.
func peerAddr(a net.Addr) netip.Addr {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.AddrPort().Addr()
	case *net.UDPAddr:
		return a.AddrPort().Addr()
	case nil:
		return netip.Addr{}
	}
	return mwengine.ParseRemoteAddr(a.String())
}
