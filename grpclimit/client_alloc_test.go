//go:build !race

package grpclimit

import (
	"context"
	"testing"
)

// TestClientAllowedPathAllocatesNothing guards the unary client
// interceptor's allowed path: it adds no allocation to the call's.
func TestClientAllowedPathAllocatesNothing(t *testing.T) {
	for _, failFast := range []bool{false, true} {
		ic := allowedClient(t, failFast)
		ctx := context.Background()
		if n := testing.AllocsPerRun(100, func() { _ = ic(ctx, checkMethod, nil, nil, nil, nopInvoker) }); n != 0 {
			t.Errorf("failFast %v: %v allocations per call, want 0", failFast, n)
		}
	}
}
