package grpclimit

import (
	"context"
	"errors"

	"google.golang.org/grpc"

	"github.com/shardlimit/shardlimit/internal/mwengine"
)

// Limiter adapts a Server to go-grpc-middleware v2's ratelimit.Limiter
// (interceptors/ratelimit), for servers that chain that package's
// interceptors already:
//
//	rl := srv.Limiter()
//	grpc.NewServer(
//		grpc.ChainUnaryInterceptor(ratelimit.UnaryServerInterceptor(rl)),
//		grpc.ChainStreamInterceptor(ratelimit.StreamServerInterceptor(rl)),
//	)
//
// Each Limit decides one call, on the Server's rules, keys and clock, as
// its own interceptors do (the full method read from the context with
// grpc.Method), and sends the rate-limit fields as header metadata,
// "retry-after" (seconds) included on a denial. What the adapter cannot
// do, the interface having no more than Limit(ctx) error:
//
//   - go-grpc-middleware answers every refusal codes.ResourceExhausted
//     with a message of its own that quotes Limit's error, dropping the
//     RetryInfo and QuotaFailure details (clients read "retry-after"
//     instead); a deny list or a missing identity is refused
//     ResourceExhausted too.
//   - Calls are not settled: Rule.Count and FinalCost are not applied
//     (every admitted call counts at its decided cost).
//   - Skip and PerMessage are not applied.
//
// A rule's Concurrency is: the call's slot is given back when the call's
// context ends, which gRPC does once the call is over. The Server's own
// interceptors do all of the above; prefer them.
type Limiter struct{ s *Server }

// Limiter returns s adapted to go-grpc-middleware's ratelimit.Limiter.
func (s *Server) Limiter() *Limiter { return &Limiter{s} }

// Limit decides the call of ctx (a server call's context) and returns nil
// if it may proceed, else the refusal (a gRPC status error, see
// Server.UnaryServerInterceptor) that go-grpc-middleware wraps. It
// is safe for concurrent use.
func (l *Limiter) Limit(ctx context.Context) error {
	s := l.s
	method, ok := grpc.Method(ctx)
	if !ok {
		return errNoMethod
	}
	sc := s.e.GetScratch()
	defer s.e.PutScratch(sc)
	var o mwengine.Outcome
	rp, fail := s.decide(ctx, method, false, sc, &o)
	s.sendFields(grpc.ServerTransportStreamFromContext(ctx), &sc.Fields)
	if !rp.Next {
		return refusal(&o, sc, rp, fail)
	}
	if f := o.InFlight; f.Held() {
		context.AfterFunc(ctx, func() { s.e.Release(f) })
	}
	return nil
}

// errNoMethod is Limit's error for a context that is not a gRPC server
// call's.
var errNoMethod = errors.New("grpclimit: Limit: the context is not a gRPC server call's (no method)")
