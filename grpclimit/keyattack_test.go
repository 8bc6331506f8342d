package grpclimit

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/shardlimit/shardlimit/httplimit"
)

// TestHostileMetadataKeys: identities of 100 KB are keyed by their
// digest (two that differ in their last byte have two budgets, one sent
// twice has one); of several values of the identity key the first is the
// identity; 5,000 x-forwarded-for entries from a trusted proxy, or
// entries that are not addresses, key a bounded, real client (never a
// fresh key per call).
func TestHostileMetadataKeys(t *testing.T) {
	rule := httplimit.Rule{Name: "svc", Prefix: service, Limit: 1, Window: time.Minute}
	e := start(t, setup{peer: loopbackPeer, cfg: ServerConfig{Options: httplimit.Options{Clock: manual(0), Rules: rules(rule),
		Keys: httplimit.KeyConfig{Header: "x-api-key", UnknownIdentity: httplimit.UnknownIdentityOwnKey}}}})
	big := strings.Repeat("k", 100<<10)
	e.run(t, []call{
		{kv: []string{"x-api-key", big + "a"}, want: ok},
		{kv: []string{"x-api-key", big + "a"}, want: res},
		{kv: []string{"x-api-key", big + "b"}, want: ok},
		{kv: []string{"x-api-key", "first", "x-api-key", "second"}, want: ok},
		{kv: []string{"x-api-key", "first"}, want: res},
		{kv: []string{"x-api-key", "second"}, want: ok},
	})
	if d, _ := e.lim.TopDenied(0); len(d) != 2 || !strings.HasPrefix(d[0].Key, "id-sha256:") && !strings.HasPrefix(d[1].Key, "id-sha256:") {
		t.Errorf("TopDenied %+v, want the digest of the long identity and id:first", d)
	}

	e = start(t, setup{peer: loopbackPeer, cfg: ServerConfig{Options: httplimit.Options{Clock: manual(0), Rules: rules(rule),
		Keys: httplimit.KeyConfig{TrustedProxies: []string{"127.0.0.0/8"}}}}})
	var hops []string
	for i := range 5000 {
		hops = append(hops, "127.0.0."+[]string{"1", "2", "3"}[i%3])
	}
	long := strings.Join(hops, ", ")
	e.run(t, []call{
		{kv: []string{"x-forwarded-for", "192.0.2.9, " + long}, want: ok}, // too many hops: keyed by the last trusted one read
		{kv: []string{"x-forwarded-for", "198.51.100.1, " + long}, want: res},
		{kv: []string{"x-forwarded-for", "not-an-ip, 192.0.2.7"}, want: ok},
		{kv: []string{"x-forwarded-for", "still-not, 192.0.2.7"}, want: res},
		{kv: []string{"x-forwarded-for", "[::1]:80, ::ffff:192.0.2.8"}, want: ok},
		{kv: []string{"x-forwarded-for", "192.0.2.8"}, want: res},
	})
	if n := len(e.lim.RuleStats()); n != 1 {
		t.Fatalf("RuleStats: %d rules", n)
	}
	if d, total := e.lim.TopDenied(0); total != 3 || len(d) != 3 {
		t.Errorf("TopDenied %+v (%d in all), want 3 keys denied once", d, total)
	}
}

// TestUnixSocketPeerShared: calls over a Unix socket, whose peer has no IP
// address, are keyed in the shared bucket ("shared"), never refused for
// a missing address; x-forwarded-for from such a peer is ignored (it is
// no trusted proxy, having no address).
func TestUnixSocketPeerShared(t *testing.T) {
	dir, err := os.MkdirTemp("", "grpclimit")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "s")
	lim, err := NewServer(ServerConfig{Options: httplimit.Options{Clock: manual(0),
		Keys:  httplimit.KeyConfig{TrustedProxies: []string{"0.0.0.0/0", "::/0"}},
		Rules: rules(httplimit.Rule{Name: "svc", Prefix: service, Limit: 2, Window: time.Minute})}})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Skipf("no Unix sockets: %v", err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor()))
	testpb.RegisterTestServiceServer(srv, &testService{})
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	defer func() { srv.Stop(); <-done }()
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := testpb.NewTestServiceClient(cc)
	var got []codes.Code
	for _, xff := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-forwarded-for", xff)
		_, err := client.EmptyCall(ctx, &testpb.Empty{})
		got = append(got, read(nil, err).code)
	}
	if got[0] != codes.OK || got[1] != codes.OK || got[2] != codes.ResourceExhausted {
		t.Errorf("codes %v, want OK, OK, ResourceExhausted (one shared bucket)", got)
	}
	if d, _ := lim.TopDenied(0); len(d) != 1 || d[0].Key != "shared" {
		t.Errorf("TopDenied %+v, want the shared key", d)
	}
}

// TestBinaryIdentityKeepsDetails: an identity that is not valid UTF-8 (a
// "-bin" metadata key carries any bytes) still gets a denial's RetryInfo
// and a QuotaFailure (whose subject, a proto string, valid UTF-8 only,
// names the kind of key, not the key).
func TestBinaryIdentityKeepsDetails(t *testing.T) {
	e := start(t, setup{cfg: ServerConfig{Options: httplimit.Options{Clock: manual(0),
		Keys:  httplimit.KeyConfig{Header: "x-id-bin", UnknownIdentity: httplimit.UnknownIdentityOwnKey},
		Rules: rules(httplimit.Rule{Name: "svc", Prefix: service, Limit: 1, Window: time.Minute})}}})
	id := "\xff\xfeclient\x00"
	e.run(t, []call{{kv: []string{"x-id-bin", id}, want: ok}})
	a := e.do(t, call{kv: []string{"x-id-bin", id}})
	if a.code != codes.ResourceExhausted || a.retry == nil || a.quota == nil {
		t.Errorf("denied: %v %q, RetryInfo %v, QuotaFailure %v; want both details", a.code, a.msg, a.retry, a.quota)
	} else if v := a.quota.GetViolations(); len(v) != 1 || v[0].GetSubject() != "rule:svc client:identity" {
		t.Errorf("QuotaFailure %v, want the subject rule:svc client:identity", v)
	}
	if a := e.do(t, call{kv: []string{"x-id-bin", "\xff\xfeother"}}); a.code != codes.OK {
		t.Errorf("another binary identity: %v, want OK (a key of its own)", a.code)
	}
}

// TestQuotaSubjectHidesKey: a client identified by a secret API key is
// refused (denied, then banned) with a QuotaFailure whose subject names
// the rule and the kind of key, and no detail, message or field of the
// refusal holds the key; a key long enough to be kept as a digest is
// named the same way.
func TestQuotaSubjectHidesKey(t *testing.T) {
	e := start(t, setup{cfg: ServerConfig{Options: httplimit.Options{Clock: manual(0),
		Keys: httplimit.KeyConfig{Header: "x-api-key", UnknownIdentity: httplimit.UnknownIdentityOwnKey},
		Rules: rules(httplimit.Rule{Name: "svc", Prefix: service, Limit: 1, Window: time.Minute,
			Ban: &httplimit.Ban{After: 1, Within: time.Minute, For: time.Hour}})}}})
	for _, secret := range []string{"sk-live-5ecret", "sk-long-" + strings.Repeat("5ecret", 200)} {
		e.run(t, []call{{kv: []string{"x-api-key", secret}, want: ok}})
		for _, what := range []string{"denied", "banned"} {
			a := e.do(t, call{kv: []string{"x-api-key", secret}})
			if a.code != codes.ResourceExhausted || a.quota == nil {
				t.Fatalf("%s: %v %q, QuotaFailure %v", what, a.code, a.msg, a.quota)
			}
			v := a.quota.GetViolations()
			if len(v) != 1 || v[0].GetSubject() != "rule:svc client:identity" {
				t.Errorf("%s: QuotaFailure %v, want the subject rule:svc client:identity", what, v)
			}
			seen := []string{a.msg, a.quota.String()}
			for _, vals := range a.header {
				seen = append(seen, vals...)
			}
			for _, s := range seen {
				if strings.Contains(s, "5ecret") {
					t.Errorf("%s: the refusal holds the key: %q", what, s)
				}
			}
		}
	}
}
