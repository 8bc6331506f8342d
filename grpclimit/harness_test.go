package grpclimit

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// T0 is the tests' origin: a Unix instant that is a multiple of every
// window used.
var T0 = time.Unix(1_734_480_000, 0)

// Full methods of the test service.
const (
	mEmpty  = "/grpc.testing.TestService/EmptyCall"
	mUnary  = "/grpc.testing.TestService/UnaryCall"
	mDuplex = "/grpc.testing.TestService/FullDuplexCall"
	service = "/grpc.testing.TestService/"
)

// testService is grpc's interop test service: EmptyCall and UnaryCall
// answer at once (UnaryCall with the status its request asks for),
// FullDuplexCall echoes every message until the client closes, and any
// call waits on block, if set, before answering.
type testService struct {
	testpb.UnimplementedTestServiceServer
	block chan struct{}
	// entered, if set, is sent to when a call starts waiting on block.
	entered chan struct{}
}

func (s *testService) wait() {
	if s.block != nil {
		if s.entered != nil {
			s.entered <- struct{}{}
		}
		<-s.block
	}
}

func (s *testService) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	s.wait()
	return &testpb.Empty{}, nil
}

func (s *testService) UnaryCall(_ context.Context, r *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.wait()
	if st := r.GetResponseStatus(); st.GetCode() != 0 {
		return nil, status.Error(codes.Code(st.GetCode()), st.GetMessage())
	}
	return &testpb.SimpleResponse{}, nil
}

func (s *testService) FullDuplexCall(st testpb.TestService_FullDuplexCallServer) error {
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := st.Send(&testpb.StreamingOutputCallResponse{Payload: m.GetPayload()}); err != nil {
			return err
		}
	}
}

// peerListener is a listener whose connections report remote as their
// peer address, so that bufconn clients can stand for any client.
type peerListener struct {
	net.Listener
	remote net.Addr
}

func (l peerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil || l.remote == nil {
		return c, err
	}
	return peerConn{c, l.remote}, nil
}

type peerConn struct {
	net.Conn
	remote net.Addr
}

func (c peerConn) RemoteAddr() net.Addr { return c.remote }

// env is a running test server and a client connected to it.
type env struct {
	lim    *Server
	svc    *testService
	client testpb.TestServiceClient
}

// setup is what a test server needs.
type setup struct {
	cfg ServerConfig
	// peer is the address the server sees the client at; nil: bufconn's
	// own (not an IP address).
	peer net.Addr
	// opts are extra server options (interceptors), used instead of the
	// Server's own interceptors when set.
	opts func(*Server) []grpc.ServerOption
	svc  *testService
}

// loopbackPeer is a trusted proxy's address for tests that speak for
// other clients with x-forwarded-for.
var loopbackPeer = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 50000}

// start starts a grpc-go server with a Server built from su on bufconn,
// and a client connected to it; both stop when the test ends.
func start(t testing.TB, su setup) *env {
	t.Helper()
	lim, err := NewServer(su.cfg)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(lim.StreamServerInterceptor()),
	}
	if su.opts != nil {
		opts = su.opts(lim)
	}
	svc := su.svc
	if svc == nil {
		svc = &testService{}
	}
	bl := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(opts...)
	testpb.RegisterTestServiceServer(srv, svc)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(peerListener{bl, su.peer})
	}()
	cc, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return bl.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		srv.Stop()
		<-done
	})
	return &env{lim: lim, svc: svc, client: testpb.NewTestServiceClient(cc)}
}

// rules returns rules of the given rules alone.
func rules(rs ...httplimit.Rule) *httplimit.Rules { return &httplimit.Rules{Rules: rs} }

// answer is what a client learnt from one call.
type answer struct {
	code    codes.Code
	msg     string
	header  metadata.MD
	retry   *errdetails.RetryInfo
	quota   *errdetails.QuotaFailure
	details int
}

// empty calls EmptyCall with the key=value metadata pairs kv.
func (e *env) empty(t *testing.T, kv ...string) answer {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(context.Background(), kv...)
	var h metadata.MD
	_, err := e.client.EmptyCall(ctx, &testpb.Empty{}, grpc.Header(&h))
	return read(h, err)
}

// read decodes a call's header and error.
func read(h metadata.MD, err error) answer {
	st := status.Convert(err)
	a := answer{code: st.Code(), msg: st.Message(), header: h}
	for _, d := range st.Details() {
		a.details++
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			a.retry = d
		case *errdetails.QuotaFailure:
			a.quota = d
		}
	}
	return a
}

// field returns the header metadata value of name, or "".
func (a answer) field(name string) string {
	if v := a.header.Get(name); len(v) > 0 {
		return v[0]
	}
	return ""
}

// manual returns a manual clock at T0 + at.
func manual(at time.Duration) *shardlimit.ManualClock { return shardlimit.NewManualClock(T0.Add(at)) }
