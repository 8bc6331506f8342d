package grpclimit

import (
	"context"
	"errors"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/outbound"
)

// The methods of grpc's health service, the client tests' server.
const (
	checkMethod = "/grpc.health.v1.Health/Check"
	watchMethod = "/grpc.health.v1.Health/Watch"
)

// clientT0 is the client tests' origin, a multiple of every window used.
var clientT0 = time.Unix(1_734_480_000, 0)

// limitServer is a real grpc-go server of the health service that admits
// at most limit calls per minute per method (a fixed window on clock) and
// answers the others ResourceExhausted with a RetryInfo of the exact
// wait, as a limiting server does. calls counts the calls that reached
// it, denied ones included.
type limitServer struct {
	srv   *grpc.Server
	calls atomic.Int64
}

func startLimitServer(t *testing.T, clock shardlimit.Clock, limit int, lis net.Listener) *limitServer {
	t.Helper()
	lim, err := shardlimit.NewFixedWindow(shardlimit.Config{Limit: limit, Window: time.Minute, Clock: clock, JanitorInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	s := &limitServer{}
	deny := func(method string) error {
		s.calls.Add(1)
		r := lim.AllowN(method, clock.Now(), 1)
		if r.Allowed {
			return nil
		}
		st, err := status.New(codes.ResourceExhausted, "rate limited").
			WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(r.RetryAfter)})
		if err != nil {
			return err
		}
		return st.Err()
	}
	s.srv = grpc.NewServer(
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := deny(info.FullMethod); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := deny(info.FullMethod); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	)
	healthpb.RegisterHealthServer(s.srv, health.NewServer())
	go func() { _ = s.srv.Serve(lis) }()
	t.Cleanup(func() {
		s.srv.Stop()
		lim.Close()
	})
	return s
}

// clientPacer returns a Pacer over a GCRA of limit per second on a
// ManualClock at clientT0, closed when the test ends.
func clientPacer(t *testing.T, limit int, failFast bool) (*outbound.Pacer, *shardlimit.ManualClock) {
	t.Helper()
	clock := shardlimit.NewManualClock(clientT0)
	lim, err := shardlimit.NewGCRA(shardlimit.Config{Limit: limit, Window: time.Second, Clock: clock, JanitorInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	p, err := outbound.New(outbound.Config{Limiter: lim, FailFast: failFast})
	if err != nil {
		t.Fatal(err)
	}
	return p, clock
}

// dial returns a health client through a Client of cfg to target, closed
// when the test ends.
func dial(t *testing.T, target string, cfg ClientConfig, opts ...grpc.DialOption) healthpb.HealthClient {
	t.Helper()
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	opts = append(opts,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(c.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(c.StreamClientInterceptor()))
	cc, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return healthpb.NewHealthClient(cc)
}

// bufServer starts a limitServer on bufconn and dials it through a
// Client of cfg.
func bufServer(t *testing.T, clock shardlimit.Clock, limit int, cfg ClientConfig) (*limitServer, healthpb.HealthClient) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	s := startLimitServer(t, clock, limit, lis)
	hc := dial(t, "passthrough:///bufnet", cfg, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		return lis.DialContext(ctx)
	}))
	return s, hc
}

// awaitClientSleepers waits until n goroutines sleep on clock. It waits
// for an event only; no verdict depends on how long that takes.
func awaitClientSleepers(t *testing.T, clock *shardlimit.ManualClock, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for clock.Sleepers() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines sleep on the clock, want %d", clock.Sleepers(), n)
		}
		runtime.Gosched()
		time.Sleep(50 * time.Microsecond)
	}
}

func check(hc healthpb.HealthClient) error {
	_, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{})
	return err
}

// holdsUntilRetryDelay is the test on the client side: a server's
// ResourceExhausted with RetryInfo holds the method, the next call waits
// (on the ManualClock, no sleep) exactly that delay, and is then admitted.
func holdsUntilRetryDelay(t *testing.T, clock *shardlimit.ManualClock, p *outbound.Pacer, s *limitServer, hc healthpb.HealthClient) {
	t.Helper()
	for i := range 2 {
		if err := check(hc); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	clock.Advance(15 * time.Second)
	err := check(hc)
	if d, ok := RetryDelay(err); status.Code(err) != codes.ResourceExhausted || !ok || d != 45*time.Second {
		t.Fatalf("third call = %v, want the server's ResourceExhausted with RetryInfo 45s", err)
	}
	if until, ok := p.Held(checkMethod); !ok || until.Sub(clock.Now()) != 45*time.Second {
		t.Fatalf("Held(%s) = %v %v, want 45s from now", checkMethod, until.Sub(clock.Now()), ok)
	}
	done := make(chan error, 1)
	go func() { done <- check(hc) }()
	awaitClientSleepers(t, clock, 1)
	clock.Advance(45*time.Second - 1)
	awaitClientSleepers(t, clock, 1)
	select {
	case err := <-done:
		t.Fatalf("the call during the hold returned %v; it should wait", err)
	default:
	}
	if n := s.calls.Load(); n != 3 {
		t.Fatalf("the server got %d calls during the hold, want 3", n)
	}
	clock.Advance(1)
	if err := <-done; err != nil {
		t.Fatalf("the call after the RetryInfo delay: %v", err)
	}
	if n := s.calls.Load(); n != 4 {
		t.Fatalf("the server got %d calls, want 4", n)
	}
}

func TestClientHoldsForRetryInfo(t *testing.T) {
	p, clock := clientPacer(t, 100, false)
	s, hc := bufServer(t, clock, 2, ClientConfig{Pacer: p})
	holdsUntilRetryDelay(t, clock, p, s, hc)
}

// The same over a real TCP connection on 127.0.0.1.
func TestClientHoldsForRetryInfoTCP(t *testing.T) {
	p, clock := clientPacer(t, 100, false)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := startLimitServer(t, clock, 2, lis)
	hc := dial(t, lis.Addr().String(), ClientConfig{Pacer: p})
	holdsUntilRetryDelay(t, clock, p, s, hc)
}

func TestClientFailFast(t *testing.T) {
	p, clock := clientPacer(t, 1, true)
	s, hc := bufServer(t, clock, 100, ClientConfig{Pacer: p})
	if err := check(hc); err != nil {
		t.Fatal(err)
	}
	err := check(hc)
	d, ok := RetryDelay(err)
	if status.Code(err) != codes.ResourceExhausted || !errors.Is(err, outbound.ErrLimited) || !ok || d != time.Second {
		t.Fatalf("second call = %v (RetryInfo %v %v), want ResourceExhausted wrapping ErrLimited with RetryInfo 1s", err, d, ok)
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("the server got %d calls, want 1: a call failed fast is not sent", n)
	}
	_ = p.HoldFor(checkMethod, time.Minute)
	clock.Advance(time.Second)
	if err := check(hc); !errors.Is(err, outbound.ErrHeld) || status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("call on a held key = %v, want ResourceExhausted wrapping ErrHeld", err)
	}
}

// A stream is decided when it opens; a ResourceExhausted from the server,
// which a stream's RecvMsg returns, holds its key.
func TestClientStreamHolds(t *testing.T) {
	p, clock := clientPacer(t, 100, true)
	s, hc := bufServer(t, clock, 1, ClientConfig{Pacer: p})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	w2, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = w2.Recv()
	if d, ok := RetryDelay(err); !ok || d != time.Minute {
		t.Fatalf("second stream = %v, want ResourceExhausted with RetryInfo 1m", err)
	}
	if _, ok := p.Held(watchMethod); !ok {
		t.Fatal("the stream's ResourceExhausted did not hold its method")
	}
	if _, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{}); !errors.Is(err, outbound.ErrHeld) {
		t.Fatalf("third stream = %v, want ErrHeld", err)
	}
	if err := check(hc); err != nil {
		t.Fatalf("another method is not held: %v", err)
	}
	if n := s.calls.Load(); n != 3 {
		t.Fatalf("the server got %d calls, want 3", n)
	}
}

func TestClientKeys(t *testing.T) {
	p, clock := clientPacer(t, 100, true)
	_, hc := bufServer(t, clock, 100, ClientConfig{Pacer: p, Key: KeyByTarget})
	_ = p.HoldFor("passthrough:///bufnet", time.Minute)
	if err := check(hc); !errors.Is(err, outbound.ErrHeld) {
		t.Fatalf("call to a held target = %v, want ErrHeld", err)
	}

	cause := errors.New("no tenant in the context")
	_, hc = bufServer(t, clock, 100, ClientConfig{Pacer: p, Key: func(context.Context, string, *grpc.ClientConn) (string, error) {
		return "", cause
	}})
	err := check(hc)
	if status.Code(err) != codes.InvalidArgument || !errors.Is(err, outbound.ErrInvalidKey) || !errors.Is(err, cause) {
		t.Fatalf("call whose key fails = %v, want InvalidArgument wrapping ErrInvalidKey and the cause", err)
	}
	if _, err := NewClient(ClientConfig{}); !errors.Is(err, outbound.ErrInvalidConfig) {
		t.Fatalf("NewClient without a Pacer = %v, want ErrInvalidConfig", err)
	}
}

// A waiting call whose context ends, or whose wait would pass its
// deadline, fails with the matching code and is not sent.
func TestClientWaitErrors(t *testing.T) {
	p, clock := clientPacer(t, 1, false)
	s, hc := bufServer(t, clock, 100, ClientConfig{Pacer: p})
	clock.Set(time.Now()) // the deadline is read against this clock
	if err := check(hc); err != nil {
		t.Fatal(err)
	}
	_ = p.HoldFor(checkMethod, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.DeadlineExceeded || !errors.Is(err, outbound.ErrHeld) {
		t.Fatalf("call held past its deadline = %v, want DeadlineExceeded wrapping ErrHeld", err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := hc.Check(ctx2, &healthpb.HealthCheckRequest{})
		done <- err
	}()
	awaitClientSleepers(t, clock, 1)
	cancel2()
	if err := <-done; status.Code(err) != codes.Canceled || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call = %v, want Canceled", err)
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("the server got %d calls, want 1", n)
	}
}

func TestRetryDelay(t *testing.T) {
	withInfo := func(ds ...time.Duration) error {
		st := status.New(codes.ResourceExhausted, "x")
		for _, d := range ds {
			st, _ = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
		}
		return st.Err()
	}
	unavailable, _ := status.New(codes.Unavailable, "x").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
	invalid, _ := status.New(codes.ResourceExhausted, "x").WithDetails(&errdetails.RetryInfo{RetryDelay: &durationpb.Duration{Seconds: 1, Nanos: -1}})
	for _, c := range []struct {
		err  error
		want time.Duration
		ok   bool
	}{
		{withInfo(3 * time.Second), 3 * time.Second, true},
		{withInfo(time.Second, 5*time.Second), 5 * time.Second, true},
		{withInfo(), 0, false},
		{unavailable.Err(), 0, false},
		{invalid.Err(), 0, false},
		{errors.New("plain"), 0, false},
		{nil, 0, false},
	} {
		if d, ok := RetryDelay(c.err); d != c.want || ok != c.ok {
			t.Errorf("RetryDelay(%v) = %v %v, want %v %v", c.err, d, ok, c.want, c.ok)
		}
	}
}

// refuse maps the Pacer's errors to gRPC codes and keeps them.
func TestRefuseCodes(t *testing.T) {
	for _, c := range []struct {
		err  error
		code codes.Code
	}{
		{&outbound.LimitError{Key: "k", RetryAfter: time.Second}, codes.ResourceExhausted},
		{&outbound.LimitError{Key: "k", RetryAfter: shardlimit.Never}, codes.ResourceExhausted},
		{shardlimit.ErrExceedsLimit, codes.ResourceExhausted},
		{shardlimit.ErrWouldExceedDeadline, codes.DeadlineExceeded},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{context.Canceled, codes.Canceled},
		{shardlimit.ErrInvalidKey, codes.InvalidArgument},
		{shardlimit.ErrClosed, codes.FailedPrecondition},
		{errors.New("other"), codes.Unknown},
	} {
		err := refuse(c.err)
		if status.Code(err) != c.code || !errors.Is(err, c.err) {
			t.Errorf("refuse(%v) = %v (%v), want code %v wrapping it", c.err, err, status.Code(err), c.code)
		}
		_, hasInfo := RetryDelay(err)
		var le *outbound.LimitError
		if want := errors.As(c.err, &le) && le.RetryAfter != shardlimit.Never; hasInfo != want {
			t.Errorf("refuse(%v) carries RetryInfo %v, want %v", c.err, hasInfo, want)
		}
	}
}
