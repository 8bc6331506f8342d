package grpclimit

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/outbound"
)

// allowedClient returns a unary client interceptor whose calls are always
// admitted (a GCRA of MaxLimit per hour on the system clock).
func allowedClient(tb testing.TB, failFast bool) grpc.UnaryClientInterceptor {
	tb.Helper()
	lim, err := shardlimit.NewGCRA(shardlimit.Config{Limit: shardlimit.MaxLimit, Window: time.Hour, JanitorInterval: -1})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { lim.Close() })
	p, err := outbound.New(outbound.Config{Limiter: lim, FailFast: failFast})
	if err != nil {
		tb.Fatal(err)
	}
	c, err := NewClient(ClientConfig{Pacer: p})
	if err != nil {
		tb.Fatal(err)
	}
	return c.UnaryClientInterceptor()
}

// nopInvoker stands for the network: the benchmarks measure what the
// interceptor adds.
func nopInvoker(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
	return nil
}

// bareClient is an interceptor that only calls the invoker, the
// benchmarks' baseline.
func bareClient(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(ctx, method, req, reply, cc, opts...)
}

// BenchmarkClientUnary measures the unary client interceptor's allowed
// path (key by method, hold lookup, the limiter's decision) against a
// bare interceptor.
func BenchmarkClientUnary(b *testing.B) {
	for _, bc := range []struct {
		name string
		ic   func(testing.TB) grpc.UnaryClientInterceptor
	}{
		{"bare", func(testing.TB) grpc.UnaryClientInterceptor { return bareClient }},
		{"wait", func(tb testing.TB) grpc.UnaryClientInterceptor { return allowedClient(tb, false) }},
		{"failfast", func(tb testing.TB) grpc.UnaryClientInterceptor { return allowedClient(tb, true) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ic := bc.ic(b)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := ic(ctx, checkMethod, nil, nil, nil, nopInvoker); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
