package grpclimit

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// metadataCost is a Cost hook reading the call's cost from its "cost"
// metadata (1 without).
func metadataCost(ctx context.Context, _ string) int {
	if n, err := strconv.Atoi(first(metadata.ValueFromIncomingContext(ctx, "cost"))); err == nil {
		return n
	}
	return 1
}

// TestRetryInfoDelayAdmitsCostlyCall: for every algorithm, several rates
// (one limit, or two limits over two windows) and costs above 1, a call
// denied after its budget is spent gets a RetryInfo delay whose wait, on
// the server's clock, admits the same call, and not 1 ns earlier; the
// calls admitted in between never exceed the limit.
func TestRetryInfoDelayAdmitsCostlyCall(t *testing.T) {
	algs := []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingLog, shardlimit.SlidingCounter, shardlimit.GCRA}
	shapes := []struct {
		name string
		rule httplimit.Rule
	}{
		{"7 per 10s", httplimit.Rule{Limit: 7, Window: 10 * time.Second, Buckets: 10}},
		{"5 per 1s", httplimit.Rule{Limit: 5, Window: time.Second, Buckets: 4}},
		{"1000 per 1m", httplimit.Rule{Limit: 1000, Window: time.Minute, Buckets: 60}},
		{"4 per 1s and 9 per 1m", httplimit.Rule{Limits: []httplimit.Rate{{Limit: 4, Window: time.Second}, {Limit: 9, Window: time.Minute}}, Buckets: 5}},
	}
	for _, alg := range algs {
		for _, sh := range shapes {
			for _, cost := range []int{1, 2, 3} {
				t.Run(fmt.Sprintf("%v/%s/cost %d", alg, sh.name, cost), func(t *testing.T) {
					retryCostCase(t, alg, sh.rule, cost)
				})
			}
		}
	}
}

func retryCostCase(t *testing.T, alg shardlimit.Algorithm, rule httplimit.Rule, cost int) {
	clk := manual(1234567 * time.Microsecond)
	rule.Name, rule.Prefix, rule.Algorithm = "svc", service, alg
	e := start(t, setup{cfg: ServerConfig{Cost: metadataCost, Options: httplimit.Options{Clock: clk, Rules: rules(rule)}}})
	kv := []string{"cost", strconv.Itoa(cost)}
	for round := range 3 {
		// Spend the budget at a steady pace, then ask once more.
		var a answer
		for i := 0; ; i++ {
			if a = e.do(t, call{kv: kv}); a.code != codes.OK {
				break
			}
			if i > 2000 {
				t.Fatal("never denied")
			}
			clk.Advance(3 * time.Millisecond)
		}
		if a.code != codes.ResourceExhausted || a.retry == nil {
			t.Fatalf("round %d: %v %q, RetryInfo %v; want ResourceExhausted with a RetryInfo", round, a.code, a.msg, a.retry)
		}
		d := a.retry.GetRetryDelay().AsDuration()
		if d <= 0 {
			t.Fatalf("round %d: delay %v", round, d)
		}
		clk.Advance(d - time.Nanosecond)
		if b := e.do(t, call{kv: kv}); b.code != codes.ResourceExhausted {
			t.Fatalf("round %d: 1 ns before the delay %v: %v, want ResourceExhausted", round, d, b.code)
		}
		clk.Advance(time.Nanosecond)
		if b := e.do(t, call{kv: kv}); b.code != codes.OK {
			t.Fatalf("round %d: after the delay %v: %v %q, want OK", round, d, b.code, b.msg)
		}
		clk.Advance(7 * time.Millisecond)
	}
}
