package grpclimit

import (
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// TestHugeCostNeverAdmitted: a cost above the limit, up to math.MaxInt,
// is refused ResourceExhausted without RetryInfo and consumes nothing,
// under FailOpen too (it is no failed decision to let through), for every
// algorithm; a cost of 0 passes and consumes nothing.
func TestHugeCostNeverAdmitted(t *testing.T) {
	for _, alg := range []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingLog, shardlimit.SlidingCounter, shardlimit.GCRA} {
		for _, n := range []int{4, shardlimit.MaxLimit, shardlimit.MaxLimit + 1, math.MaxInt} {
			t.Run(fmt.Sprintf("%v/%d", alg, n), func(t *testing.T) {
				e := start(t, setup{cfg: ServerConfig{Cost: metadataCost, Options: httplimit.Options{Clock: manual(0), OnError: httplimit.FailOpen,
					Rules: rules(httplimit.Rule{Name: "svc", Prefix: service, Algorithm: alg, Limit: 3, Window: time.Minute})}}})
				a := e.do(t, call{kv: []string{"cost", strconv.Itoa(n)}})
				if a.code != codes.ResourceExhausted || a.retry != nil {
					t.Errorf("cost %d: %v %q, RetryInfo %v; want ResourceExhausted without RetryInfo", n, a.code, a.msg, a.retry)
				}
				e.run(t, []call{
					{kv: []string{"cost", "0"}, want: ok, remaining: "3"},
					{kv: []string{"cost", "3"}, want: ok, remaining: "0"},
					{want: res},
				})
			})
		}
	}
}
