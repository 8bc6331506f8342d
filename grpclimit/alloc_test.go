//go:build !race

package grpclimit

import (
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/shardlimit/shardlimit/httplimit"
)

// TestAllocs guards what the unary interceptor allocates on the allowed
// path for a known client: nothing without fields; with them four
// however many fields are sent: the metadata map (its header and its one
// group of slots), one string holding every value and one array backing
// every value's []string; one more for a key read from request metadata
// (grpc-go's copy of the values).
func TestAllocs(t *testing.T) {
	for _, tc := range []struct {
		name string
		hc   httplimit.HeaderConfig
		kc   httplimit.KeyConfig
		want float64
	}{
		{"no fields", httplimit.HeaderConfig{OmitXRateLimit: true}, httplimit.KeyConfig{}, 0},
		{"default fields", httplimit.HeaderConfig{}, httplimit.KeyConfig{}, 4},
		{"all fields", httplimit.HeaderConfig{IETF: true, Verbose: true}, httplimit.KeyConfig{}, 4},
		{"identity key", httplimit.HeaderConfig{OmitXRateLimit: true},
			httplimit.KeyConfig{Header: "x-api-key", UnknownIdentity: httplimit.UnknownIdentityOwnKey}, 1},
		{"forwarded", httplimit.HeaderConfig{OmitXRateLimit: true}, httplimit.KeyConfig{TrustedProxies: []string{"192.0.2.0/24"}}, 1},
	} {
		in := benchServerKeys(t, tc.hc, tc.kc).UnaryServerInterceptor()
		ctx, info := unaryCall()
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("x-api-key", "client-1", "x-forwarded-for", "198.51.100.1"))
		_, _ = in(ctx, nil, info, okUnary)
		if n := testing.AllocsPerRun(1000, func() { _, _ = in(ctx, nil, info, okUnary) }); n != tc.want {
			t.Errorf("%s: %v allocations per allowed call, want %v", tc.name, n, tc.want)
		}
	}
}

// TestAllocsSettled: a call its rule settles after the handler (Count
// "failed") allocates once more than one it does not: the key's string
// that shardlimit.Limiter's Settle takes.
func TestAllocsSettled(t *testing.T) {
	lim, err := NewServer(ServerConfig{Options: httplimit.Options{Headers: httplimit.HeaderConfig{OmitXRateLimit: true},
		Rules: rules(httplimit.Rule{Name: "svc", Prefix: service, Limit: 1_000_000_000, Window: time.Hour, Count: httplimit.CountFailed})}})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	in := lim.UnaryServerInterceptor()
	ctx, info := unaryCall()
	_, _ = in(ctx, nil, info, okUnary)
	if n := testing.AllocsPerRun(1000, func() { _, _ = in(ctx, nil, info, okUnary) }); n != 1 {
		t.Errorf("%v allocations per settled call, want 1", n)
	}
	if st := lim.Stats().Settled; st.Refunded == 0 {
		t.Errorf("nothing settled: %+v", st)
	}
}
