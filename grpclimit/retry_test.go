package grpclimit

import (
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// TestRetryInfoDelayAdmitsNextCall is the acceptance test: a real
// grpc-go client, denied, receives codes.ResourceExhausted with a
// RetryInfo whose delay, waited on the server's clock, admits the next
// call, and not one nanosecond earlier; the header metadata carries the
// rate-limit fields and retry-after in whole seconds. For every algorithm.
func TestRetryInfoDelayAdmitsNextCall(t *testing.T) {
	for _, alg := range []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingLog, shardlimit.SlidingCounter, shardlimit.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			clk := manual(1500 * time.Millisecond)
			e := start(t, setup{cfg: ServerConfig{Options: httplimit.Options{
				Clock: clk,
				Rules: rules(httplimit.Rule{Name: "svc", Prefix: service, Algorithm: alg, Limit: 3, Window: 10 * time.Second, Buckets: 10}),
			}}})
			for i := range 3 {
				a := e.empty(t)
				if a.code != codes.OK {
					t.Fatalf("call %d: %v %q, want OK", i, a.code, a.msg)
				}
				if got, want := a.field("x-ratelimit-limit"), "3"; got != want {
					t.Errorf("call %d: x-ratelimit-limit %q, want %q", i, got, want)
				}
				if a.field("retry-after") != "" {
					t.Errorf("call %d: an admitted call carries retry-after", i)
				}
				clk.Advance(100 * time.Millisecond)
			}
			a := e.empty(t)
			if a.code != codes.ResourceExhausted {
				t.Fatalf("4th call: %v %q, want ResourceExhausted", a.code, a.msg)
			}
			if a.retry == nil || a.quota == nil || a.details != 2 {
				t.Fatalf("4th call: details %d, RetryInfo %v, QuotaFailure %v; want both", a.details, a.retry, a.quota)
			}
			delay := a.retry.GetRetryDelay().AsDuration()
			if delay <= 0 || delay > 10*time.Second {
				t.Fatalf("retry delay %v outside (0, 10s]", delay)
			}
			if got, want := a.field("retry-after"), strconv.FormatInt(ceilSeconds(delay), 10); got != want {
				t.Errorf("retry-after %q, want %q (the delay %v in whole seconds)", got, want, delay)
			}
			if got := a.field("x-ratelimit-remaining"); got != "0" {
				t.Errorf("x-ratelimit-remaining %q, want 0", got)
			}
			if v := a.quota.GetViolations(); len(v) != 1 || v[0].GetSubject() != "rule:svc client:shared" {
				t.Errorf("QuotaFailure violations %v, want one of rule svc for the shared key (a bufconn peer has no address)", v)
			}
			clk.Advance(delay - time.Nanosecond)
			if a := e.empty(t); a.code != codes.ResourceExhausted {
				t.Fatalf("1 ns before the delay: %v, want ResourceExhausted", a.code)
			}
			clk.Advance(time.Nanosecond)
			if a := e.empty(t); a.code != codes.OK {
				t.Fatalf("after the delay: %v %q, want OK", a.code, a.msg)
			}
		})
	}
}

func ceilSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }
