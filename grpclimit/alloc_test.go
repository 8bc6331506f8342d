//go:build !race

package grpclimit

import (
	"testing"

	"github.com/shardlimit/shardlimit/httplimit"
)

// TestAllocs guards what the unary interceptor allocates on the allowed
// path for a known client: nothing without fields; with them four
// however many fields are sent: the metadata map (its header and its one
// group of slots), one string holding every value and one array backing
// every value's []string.
func TestAllocs(t *testing.T) {
	for _, tc := range []struct {
		name string
		hc   httplimit.HeaderConfig
		want float64
	}{
		{"no fields", httplimit.HeaderConfig{OmitXRateLimit: true}, 0},
		{"default fields", httplimit.HeaderConfig{}, 4},
		{"all fields", httplimit.HeaderConfig{IETF: true, Verbose: true}, 4},
	} {
		in := benchServer(t, tc.hc).UnaryServerInterceptor()
		ctx, info := unaryCall()
		_, _ = in(ctx, nil, info, okUnary)
		if n := testing.AllocsPerRun(1000, func() { _, _ = in(ctx, nil, info, okUnary) }); n != tc.want {
			t.Errorf("%s: %v allocations per allowed call, want %v", tc.name, n, tc.want)
		}
	}
}
