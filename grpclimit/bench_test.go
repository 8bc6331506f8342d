package grpclimit

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/shardlimit/shardlimit/httplimit"
)

// fakeStream is the grpc.ServerTransportStream of a unary call that the
// benchmarks and allocation tests call the interceptor with: it keeps the
// header set last, as is, where gRPC's own merges it into the call's
// (metadata.Join: one more map and its values).
type fakeStream struct{ h metadata.MD }

func (s *fakeStream) Method() string                  { return mUnary }
func (s *fakeStream) SetHeader(md metadata.MD) error  { s.h = md; return nil }
func (s *fakeStream) SendHeader(md metadata.MD) error { s.h = md; return nil }
func (s *fakeStream) SetTrailer(metadata.MD) error    { return nil }

// unaryCall returns a unary call's context from client 192.0.2.1 and its
// info, as a grpc-go server gives them to interceptors.
func unaryCall() (context.Context, *grpc.UnaryServerInfo) {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 40000}})
	ctx = grpc.NewContextWithServerTransportStream(ctx, &fakeStream{})
	return ctx, &grpc.UnaryServerInfo{FullMethod: mUnary}
}

func okUnary(context.Context, any) (any, error) { return nil, nil }

// bareUnary is an interceptor that only calls the handler: the baseline.
func bareUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return h(ctx, req)
}

// benchServer returns a Server whose rule on the test service never
// denies, with headers hc.
func benchServer(tb testing.TB, hc httplimit.HeaderConfig) *Server {
	return benchServerKeys(tb, hc, httplimit.KeyConfig{})
}

// benchServerKeys is benchServer with keys kc.
func benchServerKeys(tb testing.TB, hc httplimit.HeaderConfig, kc httplimit.KeyConfig) *Server {
	lim, err := NewServer(ServerConfig{Options: httplimit.Options{Headers: hc, Keys: kc,
		Rules: rules(httplimit.Rule{Name: "svc", Prefix: service, Limit: 1_000_000_000, Window: time.Hour})}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = lim.Close() })
	return lim
}

func runUnary(b *testing.B, in grpc.UnaryServerInterceptor) {
	ctx, info := unaryCall()
	if _, err := in(ctx, nil, info, okUnary); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = in(ctx, nil, info, okUnary)
	}
}

// BenchmarkUnaryBare is a bare interceptor: the baseline of
// BenchmarkUnaryAllowed.
func BenchmarkUnaryBare(b *testing.B) { runUnary(b, bareUnary) }

// BenchmarkUnaryAllowed is the allowed path of the unary interceptor for
// a known client, with the default fields (sent as header metadata) and
// without any.
func BenchmarkUnaryAllowed(b *testing.B) {
	b.Run("fields", func(b *testing.B) { runUnary(b, benchServer(b, httplimit.HeaderConfig{}).UnaryServerInterceptor()) })
	b.Run("no-fields", func(b *testing.B) {
		runUnary(b, benchServer(b, httplimit.HeaderConfig{OmitXRateLimit: true}).UnaryServerInterceptor())
	})
}

// BenchmarkBufconnCall is a whole unary call from a grpc-go client to a
// grpc-go server over bufconn, without an interceptor (bare) and with the
// Server's (limited, default fields): what the limiter adds to a real
// call.
func BenchmarkBufconnCall(b *testing.B) {
	rs := rules(httplimit.Rule{Name: "svc", Prefix: service, Limit: 1_000_000_000, Window: time.Hour})
	for _, name := range []string{"bare", "limited"} {
		b.Run(name, func(b *testing.B) {
			su := setup{cfg: ServerConfig{Options: httplimit.Options{Rules: rs}}}
			if name == "bare" {
				su.opts = func(*Server) []grpc.ServerOption { return nil }
			}
			e := start(b, su)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.client.EmptyCall(ctx, &testpb.Empty{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
