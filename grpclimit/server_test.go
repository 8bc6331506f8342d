package grpclimit

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/metrics"
)

var _ metrics.HTTPMiddleware = (*Server)(nil)

// call is one step of a table: a call to method with metadata kv, and
// the code and fields wanted ("" fields are not checked).
type call struct {
	method    string
	kv        []string
	want      codes.Code
	remaining string
	limit     string
}

// do makes the call c on e.
func (e *env) do(t *testing.T, c call) answer {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(context.Background(), c.kv...)
	var h metadata.MD
	var err error
	switch c.method {
	case mEmpty, "":
		_, err = e.client.EmptyCall(ctx, &testpb.Empty{}, grpc.Header(&h))
	case mUnary:
		_, err = e.client.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Header(&h))
	default:
		t.Fatalf("no call for %s", c.method)
	}
	return read(h, err)
}

// run makes the calls, checking each.
func (e *env) run(t *testing.T, calls []call) {
	t.Helper()
	for i, c := range calls {
		a := e.do(t, c)
		if a.code != c.want {
			t.Errorf("call %d (%s %v): %v %q, want %v", i, c.method, c.kv, a.code, a.msg, c.want)
		}
		if c.remaining != "" && a.field("x-ratelimit-remaining") != c.remaining {
			t.Errorf("call %d (%s %v): x-ratelimit-remaining %q, want %q", i, c.method, c.kv, a.field("x-ratelimit-remaining"), c.remaining)
		}
		if c.limit != "" && a.field("x-ratelimit-limit") != c.limit {
			t.Errorf("call %d (%s %v): x-ratelimit-limit %q, want %q", i, c.method, c.kv, a.field("x-ratelimit-limit"), c.limit)
		}
	}
}

const (
	ok  = codes.OK
	res = codes.ResourceExhausted
)

// TestRoutes: a Path names one full method, a Prefix a service; the exact
// method wins; a rule listing methods other than POST matches no call.
func TestRoutes(t *testing.T) {
	e := start(t, setup{cfg: ServerConfig{Options: httplimit.Options{Clock: manual(0), Rules: rules(
		httplimit.Rule{Name: "empty", Path: mEmpty, Limit: 1, Window: time.Minute},
		httplimit.Rule{Name: "svc", Prefix: service, Limit: 2, Window: time.Minute},
		httplimit.Rule{Name: "get", Path: mUnary, Methods: []string{"GET"}, Limit: 0, Window: time.Minute},
	)}}})
	e.run(t, []call{
		{method: mEmpty, want: ok, limit: "1", remaining: "0"},
		{method: mEmpty, want: res, limit: "1", remaining: "0"},
		{method: mUnary, want: ok, limit: "2", remaining: "1"},
		{method: mUnary, want: ok, limit: "2", remaining: "0"},
		{method: mUnary, want: res},
	})
	if st := e.lim.Stats(); st.Allowed != 3 || st.Denied != 2 {
		t.Errorf("Stats: %d allowed, %d denied; want 3, 2", st.Allowed, st.Denied)
	}
	// Package metrics reads a Server as an HTTP middleware.
	denied := map[string]float64{}
	metrics.Collect(func(s metrics.Sample) {
		if s.Family.Name == "shardlimit_decisions_total" && len(s.Labels) == 2 && s.Labels[1] == "denied" {
			denied[s.Labels[0]] += s.Value
		}
	}, metrics.Middleware(e.lim))
	if denied["empty"] != 1 || denied["svc"] != 1 {
		t.Errorf("metrics: denied by rule %v, want empty 1, svc 1", denied)
	}
}

// TestKeys: the client key from the peer address (IPv6 per /64,
// IPv4-mapped as IPv4), from x-forwarded-for only from a trusted peer,
// from a metadata key with tiers, and from a key function.
func TestKeys(t *testing.T) {
	rule := httplimit.Rule{Name: "svc", Prefix: service, Limit: 1, Window: time.Minute}
	cases := []struct {
		name  string
		cfg   ServerConfig
		peer  net.Addr
		calls []call
		// deniedKey, if set, is the client key of the denials.
		deniedKey string
	}{
		{name: "ipv6 per /64", peer: &net.TCPAddr{IP: net.ParseIP("2001:db8:abcd:12::1"), Port: 1},
			calls: []call{{want: ok}, {want: res}}, deniedKey: "ip:2001:db8:abcd:12::/64"},
		{name: "ipv4-mapped as ipv4", peer: &net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.1"), Port: 1},
			calls: []call{{want: ok}, {want: res}}, deniedKey: "ip:192.0.2.1"},
		{name: "forwarded from a trusted peer",
			cfg:  ServerConfig{Options: httplimit.Options{Keys: httplimit.KeyConfig{TrustedProxies: []string{"127.0.0.1"}}}},
			peer: loopbackPeer,
			calls: []call{
				{kv: []string{"x-forwarded-for", "192.0.2.1"}, want: ok},
				{kv: []string{"x-forwarded-for", "192.0.2.1"}, want: res},
				{kv: []string{"x-forwarded-for", "192.0.2.2, 127.0.0.1"}, want: ok},
				{kv: []string{"x-forwarded-for", "::ffff:192.0.2.2"}, want: res},
				{want: ok}, // the proxy itself
			}},
		{name: "forwarded from an untrusted peer is ignored",
			cfg:  ServerConfig{Options: httplimit.Options{Keys: httplimit.KeyConfig{TrustedProxies: []string{"10.0.0.0/8"}}}},
			peer: loopbackPeer,
			calls: []call{
				{kv: []string{"x-forwarded-for", "192.0.2.1"}, want: ok},
				{kv: []string{"x-forwarded-for", "192.0.2.2"}, want: res},
			}},
		{name: "metadata key and tiers",
			cfg: ServerConfig{Options: httplimit.Options{
				Keys: httplimit.KeyConfig{Header: "X-API-Key"},
				Rules: &httplimit.Rules{Rules: []httplimit.Rule{rule}, Tiers: []httplimit.Tier{{
					Name: "gold", Clients: []string{"gold-1"},
					Rules: []httplimit.Rule{{Name: "gold-svc", Prefix: service, Limit: 3, Window: time.Minute}},
				}}},
			}},
			peer: loopbackPeer,
			calls: []call{
				{kv: []string{"x-api-key", "gold-1"}, want: ok, limit: "3", remaining: "2"},
				{kv: []string{"x-api-key", "gold-1"}, want: ok, remaining: "1"},
				{kv: []string{"x-api-key", "gold-1"}, want: ok, remaining: "0"},
				{kv: []string{"x-api-key", "gold-1"}, want: res},
				{kv: []string{"x-api-key", "made-up"}, want: ok, limit: "1"}, // unknown: keyed by address
				{want: res},
			}},
		{name: "key function",
			cfg: ServerConfig{
				Options: httplimit.Options{Keys: httplimit.KeyConfig{UnknownIdentity: httplimit.UnknownIdentityOwnKey}},
				KeyFunc: func(ctx context.Context, _ string) string {
					return first(metadata.ValueFromIncomingContext(ctx, "user"))
				},
			},
			calls: []call{
				{kv: []string{"user", "a"}, want: ok},
				{kv: []string{"user", "a"}, want: res},
				{kv: []string{"user", "b"}, want: ok},
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Clock = manual(0)
			if c.cfg.Rules == nil {
				c.cfg.Rules = rules(rule)
			}
			e := start(t, setup{cfg: c.cfg, peer: c.peer})
			e.run(t, c.calls)
			if d, _ := e.lim.TopDenied(0); c.deniedKey != "" && (len(d) != 1 || d[0].Key != c.deniedKey) {
				t.Errorf("TopDenied %+v, want the key %s", d, c.deniedKey)
			}
		})
	}
}

// TestOverridesListsDryRun: an override's limit, a deny list
// (PermissionDenied), an exempt list, dry run (denials pass, counted).
func TestOverridesListsDryRun(t *testing.T) {
	peer := &net.TCPAddr{IP: net.ParseIP("203.0.113.7"), Port: 1}
	rs := &httplimit.Rules{
		Rules:     []httplimit.Rule{{Name: "svc", Prefix: service, Limit: 1, Window: time.Minute}},
		Overrides: []httplimit.Override{{Rule: "svc", IP: "203.0.113.7", Limit: 2}},
	}
	e := start(t, setup{cfg: ServerConfig{Options: httplimit.Options{Clock: manual(0), Rules: rs}}, peer: peer})
	e.run(t, []call{{want: ok, limit: "2"}, {want: ok}, {want: res, limit: "2"}})

	deny := &httplimit.Rules{Rules: rs.Rules, Deny: httplimit.ClientList{Networks: []string{"203.0.113.0/24"}}}
	e = start(t, setup{cfg: ServerConfig{Options: httplimit.Options{Clock: manual(0), Rules: deny}}, peer: peer})
	e.run(t, []call{{want: codes.PermissionDenied}})

	exempt := &httplimit.Rules{Rules: rs.Rules, Exempt: httplimit.ClientList{Networks: []string{"203.0.113.7"}}}
	e = start(t, setup{cfg: ServerConfig{Options: httplimit.Options{Clock: manual(0), Rules: exempt}}, peer: peer})
	e.run(t, []call{{want: ok}, {want: ok}, {want: ok}})

	e = start(t, setup{cfg: ServerConfig{Options: httplimit.Options{Clock: manual(0), Rules: rules(rs.Rules...), DryRun: true}}, peer: peer})
	e.run(t, []call{{want: ok, remaining: "0"}, {want: ok, remaining: "0"}, {want: ok}})
	if st := e.lim.Stats(); st.WouldDeny != 2 {
		t.Errorf("dry run: WouldDeny %d, want 2", st.WouldDeny)
	}
	if d, _ := e.lim.TopDenied(0); len(d) != 1 || d[0].Key != "ip:203.0.113.7" || d[0].Count != 2 {
		t.Errorf("TopDenied %+v, want ip:203.0.113.7 twice", d)
	}
}

// TestReloadKeepsCounters: a reload that keeps a rule keeps its counts and
// applies its new limit at once; a rule with a cost header is refused.
func TestReloadKeepsCounters(t *testing.T) {
	rule := httplimit.Rule{Name: "svc", Prefix: service, Limit: 2, Window: time.Minute}
	e := start(t, setup{cfg: ServerConfig{Options: httplimit.Options{Clock: manual(0), Rules: rules(rule)}}})
	e.run(t, []call{{want: ok}, {want: ok}, {want: res}})
	rule.Limit = 3
	if err := e.lim.Reload(rules(rule)); err != nil {
		t.Fatal(err)
	}
	e.run(t, []call{{want: ok, limit: "3", remaining: "0"}, {want: res}})
	rule.CostHeader = "x-cost"
	if err := e.lim.Reload(rules(rule)); !errors.Is(err, shardlimit.ErrInvalidConfig) {
		t.Errorf("Reload with a cost header: %v, want ErrInvalidConfig", err)
	}
	if _, err := NewServer(ServerConfig{Options: httplimit.Options{Rules: rules(rule)}}); !errors.Is(err, shardlimit.ErrInvalidConfig) {
		t.Errorf("NewServer with a cost header: %v, want ErrInvalidConfig", err)
	}
	if _, err := NewServer(ServerConfig{}); !errors.Is(err, httplimit.ErrNoRules) {
		t.Errorf("NewServer without rules: %v, want ErrNoRules", err)
	}
}

// TestClosedFailsClosed: after Close calls are refused Unavailable (the
// default FailClosed), or pass under FailOpen.
func TestClosedFailsClosed(t *testing.T) {
	rs := rules(httplimit.Rule{Name: "svc", Prefix: service, Limit: 5, Window: time.Minute})
	e := start(t, setup{cfg: ServerConfig{Options: httplimit.Options{Clock: manual(0), Rules: rs}}})
	_ = e.lim.Close()
	e.run(t, []call{{want: codes.Unavailable}})
	e = start(t, setup{cfg: ServerConfig{Options: httplimit.Options{Clock: manual(0), Rules: rs, OnError: httplimit.FailOpen}}})
	_ = e.lim.Close()
	e.run(t, []call{{want: ok}})
	// ErrorCode decides per call, in place of OnError.
	var seen atomic.Value // the error ErrorCode saw
	e = start(t, setup{cfg: ServerConfig{Options: httplimit.Options{Clock: manual(0), Rules: rs, OnError: httplimit.FailOpen},
		ErrorCode: func(_ context.Context, m string, err error) codes.Code {
			seen.Store(err)
			if m == mUnary {
				return codes.OK
			}
			return codes.Aborted
		}}})
	_ = e.lim.Close()
	e.run(t, []call{{want: codes.Aborted}, {method: mUnary, want: ok}})
	if err, _ := seen.Load().(error); !errors.Is(err, shardlimit.ErrClosed) {
		t.Errorf("ErrorCode saw %v, want ErrClosed", err)
	}
}

// TestCostAndSkip: the cost hook's cost is consumed; a negative one is
// refused Internal; a cost above the limit is ResourceExhausted without
// RetryInfo; Skip passes without fields.
func TestCostAndSkip(t *testing.T) {
	e := start(t, setup{cfg: ServerConfig{
		Options: httplimit.Options{Clock: manual(0), Rules: rules(httplimit.Rule{Name: "svc", Prefix: service, Limit: 3, Window: time.Minute})},
		Cost: func(ctx context.Context, _ string) int {
			switch first(metadata.ValueFromIncomingContext(ctx, "cost")) {
			case "2":
				return 2
			case "-1":
				return -1
			case "9":
				return 9
			}
			return 1
		},
		Skip: func(_ context.Context, m string) bool { return m == mUnary },
	}})
	e.run(t, []call{
		{kv: []string{"cost", "2"}, want: ok, remaining: "1"},
		{kv: []string{"cost", "-1"}, want: codes.Internal},
		{kv: []string{"cost", "2"}, want: res, remaining: "1"},
	})
	a := e.do(t, call{kv: []string{"cost", "9"}})
	if a.code != res || a.retry != nil || a.quota == nil || a.field("retry-after") != "" {
		t.Errorf("cost above the limit: %v, RetryInfo %v, QuotaFailure %v, retry-after %q; want ResourceExhausted, no RetryInfo, a QuotaFailure, no retry-after",
			a.code, a.retry, a.quota, a.field("retry-after"))
	}
	for range 5 {
		if a := e.do(t, call{method: mUnary}); a.code != ok || len(a.header.Get("x-ratelimit-limit")) != 0 {
			t.Fatalf("skipped call: %v, fields %v; want OK without fields", a.code, a.header)
		}
	}
}

// TestNoIdentityUnauthenticated: EmptyKeyReject refuses a call without
// identity Unauthenticated, consuming nothing.
func TestNoIdentityUnauthenticated(t *testing.T) {
	e := start(t, setup{cfg: ServerConfig{Options: httplimit.Options{Clock: manual(0),
		Keys:  httplimit.KeyConfig{Header: "x-api-key", EmptyKey: httplimit.EmptyKeyReject, UnknownIdentity: httplimit.UnknownIdentityOwnKey},
		Rules: rules(httplimit.Rule{Name: "svc", Prefix: service, Limit: 1, Window: time.Minute})}}})
	e.run(t, []call{{want: codes.Unauthenticated}, {kv: []string{"x-api-key", "k"}, want: ok}, {kv: []string{"x-api-key", "k"}, want: res}})
}

// TestCountFailed: under Count "failed" a successful call is refunded
// once its handler returns; a failed one (its code maps to >= 400) counts.
func TestCountFailed(t *testing.T) {
	e := start(t, setup{cfg: ServerConfig{Options: httplimit.Options{Clock: manual(0),
		Rules: rules(httplimit.Rule{Name: "svc", Prefix: service, Limit: 2, Window: time.Minute, Count: httplimit.CountFailed})}}})
	fail := func() codes.Code {
		_, err := e.client.UnaryCall(context.Background(), &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.NotFound)}})
		return read(nil, err).code
	}
	for range 5 {
		e.run(t, []call{{method: mUnary, want: ok}})
	}
	if c := fail(); c != codes.NotFound {
		t.Fatalf("first failure: %v", c)
	}
	if c := fail(); c != codes.NotFound {
		t.Fatalf("second failure: %v", c)
	}
	e.run(t, []call{{method: mUnary, want: res}})
	if st := e.lim.Stats().Settled; st.Refunded != 5 {
		t.Errorf("refunded %d, want 5", st.Refunded)
	}
}

// TestFinalCost: the final cost hook settles a unary call's cost.
func TestFinalCost(t *testing.T) {
	e := start(t, setup{cfg: ServerConfig{
		Options:   httplimit.Options{Clock: manual(0), Rules: rules(httplimit.Rule{Name: "svc", Prefix: service, Limit: 5, Window: time.Minute})},
		FinalCost: func(context.Context, string, error, httplimit.Decision) int { return 4 },
	}})
	// 1 decided, 4 settled: 4 used; 1 more fits, then 8 used (an overdraft).
	e.run(t, []call{{want: ok, remaining: "4"}, {want: ok, remaining: "0"}, {want: res, remaining: "0"}})
	if st := e.lim.Stats().Settled; st.Charged != 6 {
		t.Errorf("charged %d, want 6", st.Charged)
	}
}

// TestConcurrency: a rule's Concurrency limits calls in flight; the slot is
// given back when the handler returns.
func TestConcurrency(t *testing.T) {
	svc := &testService{block: make(chan struct{}), entered: make(chan struct{})}
	e := start(t, setup{svc: svc, cfg: ServerConfig{Options: httplimit.Options{Clock: manual(0),
		Rules: rules(httplimit.Rule{Name: "svc", Prefix: service, Limit: 100, Window: time.Minute,
			Concurrency: &httplimit.Concurrency{Limit: 1, RetryAfter: 2 * time.Second}})}}})
	concurrencyCase(t, e, svc)
}

// concurrencyCase holds one call in its handler and checks that a second
// is refused with RetryInfo, and a third admitted once the first is over.
func concurrencyCase(t *testing.T, e *env, svc *testService) {
	t.Helper()
	done := make(chan answer)
	go func() { done <- e.do(t, call{}) }()
	<-svc.entered
	a := e.do(t, call{})
	if a.code != res || a.retry.GetRetryDelay().AsDuration() != 2*time.Second {
		t.Errorf("second call in flight: %v %q, RetryInfo %v; want ResourceExhausted, 2s", a.code, a.msg, a.retry)
	}
	svc.block <- struct{}{}
	if a := <-done; a.code != ok {
		t.Errorf("first call: %v", a.code)
	}
	go func() { <-svc.entered; svc.block <- struct{}{} }()
	// The slot is given back after the handler returns, which the client
	// may learn first: wait for it by the server's own count.
	for e.lim.InFlight("svc", "shared") != 0 {
		time.Sleep(time.Millisecond)
	}
	if a := e.do(t, call{}); a.code != ok {
		t.Errorf("call after the first ended: %v %q", a.code, a.msg)
	}
}

// TestBan: a ban set by SetBan refuses the client ResourceExhausted with a
// RetryInfo of the ban's rest.
func TestBan(t *testing.T) {
	clk := manual(0)
	e := start(t, setup{peer: loopbackPeer, cfg: ServerConfig{Options: httplimit.Options{Clock: clk,
		Rules: rules(httplimit.Rule{Name: "svc", Prefix: service, Limit: 100, Window: time.Minute})}}})
	if err := e.lim.SetBan("svc", "ip:127.0.0.1", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second)
	a := e.do(t, call{})
	if a.code != res || a.retry.GetRetryDelay().AsDuration() != 20*time.Second || a.field("retry-after") != "20" {
		t.Errorf("banned: %v, RetryInfo %v, retry-after %q; want ResourceExhausted, 20s", a.code, a.retry, a.field("retry-after"))
	}
	if !strings.Contains(a.msg, "banned") {
		t.Errorf("message %q does not say banned", a.msg)
	}
}

// TestDeniedHook: the Denied hook's error is what a denied call gets, with
// the fields still in its header; nil keeps the default status; a deny
// list does not ask it.
func TestDeniedHook(t *testing.T) {
	peer := &net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 1}
	var asked atomic.Int32
	cfg := ServerConfig{
		Options: httplimit.Options{Clock: manual(0), Rules: &httplimit.Rules{
			Rules: []httplimit.Rule{{Name: "svc", Prefix: service, Limit: 1, Window: time.Minute}},
			Deny:  httplimit.ClientList{Networks: []string{"192.0.2.2"}},
		}},
		Denied: func(_ context.Context, m string, d httplimit.Decision, st *status.Status) error {
			asked.Add(1)
			if m == mUnary || st.Code() != codes.ResourceExhausted || d.Rule != "svc" {
				return nil
			}
			return status.Error(codes.Unavailable, "custom: "+st.Message())
		},
	}
	listed := start(t, setup{peer: &net.TCPAddr{IP: net.ParseIP("192.0.2.2"), Port: 1}, cfg: cfg})
	listed.run(t, []call{{want: codes.PermissionDenied}})
	e := start(t, setup{peer: peer, cfg: cfg})
	e.run(t, []call{{want: ok}})
	a := e.do(t, call{})
	if a.code != codes.Unavailable || !strings.HasPrefix(a.msg, "custom: Too Many Requests") || a.field("retry-after") != "60" {
		t.Errorf("denied with the hook: %v %q, retry-after %q", a.code, a.msg, a.field("retry-after"))
	}
	if a := e.do(t, call{method: mUnary}); a.code != res || a.retry == nil {
		t.Errorf("hook returning nil: %v, RetryInfo %v; want the default", a.code, a.retry)
	}
	if n := asked.Load(); n != 2 {
		t.Errorf("hook asked %d times, want 2", n)
	}
}
