package grpclimit

import (
	"context"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardlimit/shardlimit/httplimit"
)

// TestPerMessageStreamHoldsOneSlot: with PerMessage and a rule's
// Concurrency of 1, an admitted stream's messages are admitted (a message
// holds no slot: its stream does), and a second stream of the client is
// refused while the first is open.
func TestPerMessageStreamHoldsOneSlot(t *testing.T) {
	e := start(t, setup{cfg: ServerConfig{PerMessage: true, Options: httplimit.Options{Clock: manual(0),
		Rules: rules(httplimit.Rule{Name: "duplex", Path: mDuplex, Limit: 100, Window: time.Minute,
			Concurrency: &httplimit.Concurrency{Limit: 1}})}}})
	st, _, err := e.openDuplex(t)
	if err != nil {
		t.Fatalf("first message on the only stream in flight: %v", err)
	}
	for i := range 3 {
		if err := echo(st); err != nil {
			t.Fatalf("message %d more: %v", i, err)
		}
	}
	if _, _, err := e.openDuplex(t); read(nil, err).code != codes.ResourceExhausted {
		t.Errorf("second stream while the first is open: %v, want ResourceExhausted", err)
	}
	_ = st.CloseSend()
	if _, err := st.Recv(); err == nil {
		t.Error("a message after CloseSend")
	}
}

// chain returns server options that run outer, then the Server's own
// interceptors, then inner, around every handler.
func chain(outerU, innerU grpc.UnaryServerInterceptor, outerS, innerS grpc.StreamServerInterceptor) func(*Server) []grpc.ServerOption {
	return func(lim *Server) []grpc.ServerOption {
		return []grpc.ServerOption{
			grpc.ChainUnaryInterceptor(outerU, lim.UnaryServerInterceptor(), innerU),
			grpc.ChainStreamInterceptor(outerS, lim.StreamServerInterceptor(), innerS),
		}
	}
}

// TestPanicGivesSlotBackAndPropagates: a handler that panics, unary or
// stream, gives its Concurrency slot back, and the panic reaches
// go-grpc-middleware's recovery interceptor outside the Server's
// unchanged.
func TestPanicGivesSlotBackAndPropagates(t *testing.T) {
	recovered := make(chan any, 1)
	rec := recovery.WithRecoveryHandler(func(p any) error {
		recovered <- p
		return status.Error(codes.Internal, "panic")
	})
	recoverU, recoverS := recovery.UnaryServerInterceptor(rec), recovery.StreamServerInterceptor(rec)
	panicU := func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) { panic("unary boom") }
	panicS := func(any, grpc.ServerStream, *grpc.StreamServerInfo, grpc.StreamHandler) error { panic("stream boom") }
	e := start(t, setup{opts: chain(recoverU, panicU, recoverS, panicS), cfg: ServerConfig{Options: httplimit.Options{Clock: manual(0),
		Rules: rules(httplimit.Rule{Name: "svc", Prefix: service, Limit: 100, Window: time.Minute,
			Concurrency: &httplimit.Concurrency{Limit: 1}})}}})
	for i := range 3 {
		if a := e.do(t, call{}); a.code != codes.Internal {
			t.Fatalf("unary call %d: %v %q, want Internal (the recovered panic), not a slot still held", i, a.code, a.msg)
		}
		if p := <-recovered; p != "unary boom" {
			t.Errorf("recovered %v, want the handler's panic", p)
		}
		if n := e.lim.InFlight("svc", "shared"); n != 0 {
			t.Errorf("in flight after a unary panic: %d, want 0", n)
		}
	}
	for i := range 3 {
		st, err := e.client.FullDuplexCall(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if a := read(nil, echo(st)); a.code != codes.Internal {
			t.Fatalf("stream %d: %v %q, want Internal (the recovered panic)", i, a.code, a.msg)
		}
		if p := <-recovered; p != "stream boom" {
			t.Errorf("recovered %v, want the handler's panic", p)
		}
		if n := e.lim.InFlight("svc", "shared"); n != 0 {
			t.Errorf("in flight after a stream panic: %d, want 0", n)
		}
	}
}

// TestCancelledStreamGivesSlotBackSettledOnce: a stream the client
// cancels mid-way gives its Concurrency slot back once its handler
// returns, and is settled exactly once (under Count "successful" a
// cancelled stream is refunded its one unit).
func TestCancelledStreamGivesSlotBackSettledOnce(t *testing.T) {
	ended := make(chan error, 1)
	outerS := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		err := h(srv, ss)
		ended <- err
		return err
	}
	passU := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(ctx, req)
	}
	passS := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		return h(srv, ss)
	}
	for _, perMsg := range []bool{false, true} {
		e := start(t, setup{opts: chain(passU, passU, outerS, passS), cfg: ServerConfig{PerMessage: perMsg, Options: httplimit.Options{Clock: manual(0),
			Rules: rules(httplimit.Rule{Name: "duplex", Path: mDuplex, Limit: 100, Window: time.Minute, Count: httplimit.CountSuccessful,
				Concurrency: &httplimit.Concurrency{Limit: 1}})}}})
		const streams = 5
		for i := range streams {
			ctx, cancel := context.WithCancel(t.Context())
			st, err := e.client.FullDuplexCall(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := echo(st); err != nil {
				t.Fatalf("PerMessage %v: stream %d (the one before it over): %v", perMsg, i, err)
			}
			cancel()
			if err := <-ended; status.Code(err) != codes.Canceled {
				t.Errorf("PerMessage %v: stream %d ended %v, want Canceled", perMsg, i, err)
			}
			if n := e.lim.InFlight("duplex", "shared"); n != 0 {
				t.Errorf("PerMessage %v: in flight after a cancelled stream: %d, want 0", perMsg, n)
			}
		}
		if s := e.lim.Stats().Settled; s.Refunded != streams || s.Charged != 0 {
			t.Errorf("PerMessage %v: settled %+v, want %d refunded (each cancelled stream once)", perMsg, s, streams)
		}
	}
}

// TestPanickedCallSettledAsFailed: under Count "successful" a handler
// that panics, unary or stream, is settled once as a failed call
// (codes.Internal, as the recovery interceptor outside answers it), so
// its unit is refunded, as the HTTP middleware settles a panic as a 500;
// the panic still reaches the recovery interceptor.
func TestPanickedCallSettledAsFailed(t *testing.T) {
	recoverU := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (_ any, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = status.Errorf(codes.Internal, "panic: %v", p)
			}
		}()
		return h(ctx, req)
	}
	recoverS := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = status.Errorf(codes.Internal, "panic: %v", p)
			}
		}()
		return h(srv, ss)
	}
	panicU := func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) { panic("unary boom") }
	panicS := func(any, grpc.ServerStream, *grpc.StreamServerInfo, grpc.StreamHandler) error { panic("stream boom") }
	e := start(t, setup{opts: chain(recoverU, panicU, recoverS, panicS), cfg: ServerConfig{Options: httplimit.Options{Clock: manual(0),
		Rules: rules(httplimit.Rule{Name: "svc", Prefix: service, Limit: 2, Window: time.Minute, Count: httplimit.CountSuccessful})}}})
	for i := range 4 {
		if a := e.do(t, call{}); a.code != codes.Internal || a.msg != "panic: unary boom" {
			t.Fatalf("unary call %d: %v %q, want Internal from the recovered panic", i, a.code, a.msg)
		}
		st, err := e.client.FullDuplexCall(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if a := read(nil, echo(st)); a.code != codes.Internal || a.msg != "panic: stream boom" {
			t.Fatalf("stream %d: %v %q, want Internal from the recovered panic", i, a.code, a.msg)
		}
	}
	if s := e.lim.Stats().Settled; s.Refunded != 8 || s.Charged != 0 {
		t.Errorf("settled %+v, want 8 refunded (each panicked call once)", s)
	}
}

// TestCloseDuringCalls: a Server closed while a call (settled, holding a
// Concurrency slot) and a stream are in their handlers lets them end
// normally (their settlement counted as an error, their slots given back),
// and refuses later calls Unavailable.
func TestCloseDuringCalls(t *testing.T) {
	svc := &testService{block: make(chan struct{}), entered: make(chan struct{})}
	e := start(t, setup{svc: svc, cfg: ServerConfig{Options: httplimit.Options{Clock: manual(0),
		Rules: rules(httplimit.Rule{Name: "svc", Prefix: service, Limit: 10, Window: time.Minute, Count: httplimit.CountFailed,
			Concurrency: &httplimit.Concurrency{Limit: 5}})}}})
	st, _, err := e.openDuplex(t)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan answer)
	go func() { done <- e.do(t, call{}) }()
	<-svc.entered
	_ = e.lim.Close()
	svc.block <- struct{}{}
	if a := <-done; a.code != codes.OK {
		t.Errorf("the call in flight at Close: %v %q, want OK", a.code, a.msg)
	}
	if err := echo(st); err != nil {
		t.Errorf("the stream open at Close: %v", err)
	}
	_ = st.CloseSend()
	_, _ = st.Recv()
	waitInFlight(t, e.lim, "svc", "shared")
	if a := e.do(t, call{}); a.code != codes.Unavailable {
		t.Errorf("after Close: %v, want Unavailable", a.code)
	}
}
