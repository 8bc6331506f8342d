package grpclimit

import (
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// TestConcurrentCallsNeverOverAdmit: calls made at once from many
// goroutines, unary and streams, on one key and a frozen clock, are
// admitted exactly up to the limit, for every algorithm; the rest are
// ResourceExhausted.
func TestConcurrentCallsNeverOverAdmit(t *testing.T) {
	const limit, workers, each = 25, 8, 6
	for _, alg := range []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingLog, shardlimit.SlidingCounter, shardlimit.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			e := start(t, setup{cfg: ServerConfig{Options: httplimit.Options{Clock: manual(0),
				Rules: rules(httplimit.Rule{Name: "svc", Prefix: service, Algorithm: alg, Limit: limit, Window: time.Minute})}}})
			var mu sync.Mutex
			counts := map[codes.Code]int{}
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for i := range each {
						var c codes.Code
						if (w+i)%3 == 0 {
							st, err := e.client.FullDuplexCall(t.Context())
							if err == nil {
								err = echo(st)
								_ = st.CloseSend()
							}
							c = read(nil, err).code
						} else {
							c = e.do(t, call{}).code
						}
						mu.Lock()
						counts[c]++
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if counts[codes.OK] != limit || counts[codes.ResourceExhausted] != workers*each-limit {
				t.Errorf("codes %v, want %d OK and %d ResourceExhausted", counts, limit, workers*each-limit)
			}
		})
	}
}
