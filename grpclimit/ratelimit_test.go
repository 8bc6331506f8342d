package grpclimit

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/shardlimit/shardlimit/httplimit"
)

var _ ratelimit.Limiter = (*Limiter)(nil)

// chained serves the Server through go-grpc-middleware's ratelimit
// interceptors, behind another interceptor of the chain.
func chained(lim *Server) []grpc.ServerOption {
	rl := lim.Limiter()
	pass := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(ctx, req)
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(pass, ratelimit.UnaryServerInterceptor(rl)),
		grpc.ChainStreamInterceptor(ratelimit.StreamServerInterceptor(rl)),
	}
}

// TestGoGRPCMiddlewareChain: the adapter plugs into go-grpc-middleware's
// ratelimit interceptors: calls are limited per method rule, a denied call
// is ResourceExhausted with the retry in the message and the fields
// (retry-after included) as header metadata, and the wait admits.
func TestGoGRPCMiddlewareChain(t *testing.T) {
	clk := manual(0)
	e := start(t, setup{opts: chained, cfg: ServerConfig{Options: httplimit.Options{Clock: clk,
		Rules: rules(
			httplimit.Rule{Name: "empty", Path: mEmpty, Limit: 2, Window: 10 * time.Second},
			httplimit.Rule{Name: "duplex", Path: mDuplex, Limit: 1, Window: 10 * time.Second},
		)}}})
	e.run(t, []call{{want: ok, remaining: "1"}, {want: ok, remaining: "0"}})
	a := e.do(t, call{})
	if a.code != codes.ResourceExhausted || a.field("retry-after") != "10" || !strings.Contains(a.msg, "retry in 10 s") {
		t.Errorf("denied: %v %q, retry-after %q; want ResourceExhausted, 10", a.code, a.msg, a.field("retry-after"))
	}
	e.run(t, []call{{method: mUnary, want: ok}}) // no rule
	if _, _, err := e.openDuplex(t); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	if _, _, err := e.openDuplex(t); read(nil, err).code != codes.ResourceExhausted {
		t.Errorf("second stream: %v, want ResourceExhausted", err)
	}
	clk.Advance(10 * time.Second)
	e.run(t, []call{{want: ok, remaining: "1"}})
}

// TestAdapterConcurrency: through the adapter a call's in-flight slot is
// held until the call is over.
func TestAdapterConcurrency(t *testing.T) {
	svc := &testService{block: make(chan struct{}), entered: make(chan struct{})}
	e := start(t, setup{svc: svc, opts: chained, cfg: ServerConfig{Options: httplimit.Options{Clock: manual(0),
		Rules: rules(httplimit.Rule{Name: "svc", Prefix: service, Limit: 100, Window: time.Minute,
			Concurrency: &httplimit.Concurrency{Limit: 1, RetryAfter: 2 * time.Second}})}}})
	done := make(chan answer)
	go func() { done <- e.do(t, call{}) }()
	<-svc.entered
	if a := e.do(t, call{}); a.code != codes.ResourceExhausted {
		t.Errorf("second call in flight: %v %q, want ResourceExhausted", a.code, a.msg)
	}
	svc.block <- struct{}{}
	<-done
	for e.lim.InFlight("svc", "shared") != 0 { // given back when the call's context ends
		time.Sleep(time.Millisecond)
	}
	go func() { <-svc.entered; svc.block <- struct{}{} }()
	if a := e.do(t, call{}); a.code != codes.OK {
		t.Errorf("after the first: %v %q", a.code, a.msg)
	}
}

// TestAdapterNoMethod: Limit refuses a context that is not a server
// call's.
func TestAdapterNoMethod(t *testing.T) {
	lim, err := NewServer(ServerConfig{Options: httplimit.Options{Rules: rules(httplimit.Rule{Name: "a", Limit: 1, Window: time.Second})}})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	if err := lim.Limiter().Limit(context.Background()); err == nil {
		t.Error("Limit(context.Background()) = nil")
	}
}

// TestAdapterStreamFieldsAndSlot: through the adapter a stream gets the
// fields in its header, holds its Concurrency slot while it is open and
// gives it back when it ends, so that the client's next stream is
// admitted.
func TestAdapterStreamFieldsAndSlot(t *testing.T) {
	e := start(t, setup{opts: chained, cfg: ServerConfig{Options: httplimit.Options{Clock: manual(0),
		Rules: rules(httplimit.Rule{Name: "duplex", Path: mDuplex, Limit: 100, Window: time.Minute,
			Concurrency: &httplimit.Concurrency{Limit: 1}})}}})
	for i := range 3 {
		st, h, err := e.openDuplex(t)
		if err != nil || first(h.Get("x-ratelimit-remaining")) != strconv.Itoa(99-i) {
			t.Fatalf("stream %d: %v, header %v; want x-ratelimit-remaining %d", i, err, h, 99-i)
		}
		if _, _, err := e.openDuplex(t); read(nil, err).code != codes.ResourceExhausted {
			t.Errorf("stream %d: a second one while it is open: %v, want ResourceExhausted", i, err)
		}
		_ = st.CloseSend()
		if _, err := st.Recv(); err == nil {
			t.Fatal("a message after CloseSend")
		}
		waitInFlight(t, e.lim, "duplex", "shared")
	}
}
