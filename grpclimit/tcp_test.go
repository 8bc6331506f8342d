package grpclimit

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/shardlimit/shardlimit/httplimit"
)

// TestTCP runs a real grpc-go server on 127.0.0.1 (and on [::1] where
// IPv6 is available) and a client over TCP: calls are keyed by the peer
// address ("ip:127.0.0.1"; "ip:::/64", ::1's /64), and the denied one gets
// ResourceExhausted, RetryInfo and the fields, which a wait of the delay
// on the server's clock ends.
func TestTCP(t *testing.T) {
	t.Run("ipv4", func(t *testing.T) { tcpCase(t, "127.0.0.1:0", "ip:127.0.0.1") })
	t.Run("ipv6", func(t *testing.T) { tcpCase(t, "[::1]:0", "ip:::/64") })
}

func tcpCase(t *testing.T, addr, key string) {
	clk := manual(0)
	lim, err := NewServer(ServerConfig{Options: httplimit.Options{Clock: clk, Headers: httplimit.HeaderConfig{IETF: true},
		Rules: rules(httplimit.Rule{Name: "svc", Prefix: service, Limit: 2, Window: 10 * time.Second})}})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil && addr[0] == '[' {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor()), grpc.ChainStreamInterceptor(lim.StreamServerInterceptor()))
	testpb.RegisterTestServiceServer(srv, &testService{})
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	defer func() { srv.Stop(); <-done }()
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := testpb.NewTestServiceClient(cc)
	callOnce := func() answer {
		var h metadata.MD
		_, err := client.EmptyCall(context.Background(), &testpb.Empty{}, grpc.Header(&h))
		return read(h, err)
	}
	for i := range 2 {
		if a := callOnce(); a.code != codes.OK || a.field("ratelimit") == "" {
			t.Fatalf("call %d: %v %q, ratelimit %q", i, a.code, a.msg, a.field("ratelimit"))
		}
	}
	a := callOnce()
	if a.code != codes.ResourceExhausted || a.retry == nil || a.field("retry-after") != "10" || a.field("ratelimit-policy") != `"svc";q=2;w=10` {
		t.Fatalf("3rd call: %v %q, RetryInfo %v, fields %v", a.code, a.msg, a.retry, a.header)
	}
	if v := a.quota.GetViolations(); len(v) != 1 || v[0].GetSubject() != "rule:svc client:address" {
		t.Errorf("QuotaFailure %v, want a violation of rule svc by an address", v)
	}
	if d, _ := lim.TopDenied(0); len(d) != 1 || d[0].Key != key {
		t.Errorf("TopDenied %+v, want %s", d, key)
	}
	clk.Advance(a.retry.GetRetryDelay().AsDuration())
	if a := callOnce(); a.code != codes.OK {
		t.Errorf("after the delay: %v %q", a.code, a.msg)
	}
}
