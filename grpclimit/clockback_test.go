package grpclimit

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// TestClockSetBackNeverAdmitsMore: a server clock set back (a manual
// clock's Set, as a wall clock stepped back) admits nothing more: the
// key stands still at its latest instant (the time rule, C11), its
// denials' RetryInfo delay is measured from the stepped-back now, and
// waiting it admits exactly then; for every algorithm, unary calls and
// streams alike.
func TestClockSetBackNeverAdmitsMore(t *testing.T) {
	for _, alg := range []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingLog, shardlimit.SlidingCounter, shardlimit.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			clk := manual(30 * time.Second)
			e := start(t, setup{cfg: ServerConfig{Options: httplimit.Options{Clock: clk,
				Rules: rules(httplimit.Rule{Name: "svc", Prefix: service, Algorithm: alg, Limit: 3, Window: 10 * time.Second, Buckets: 10})}}})
			admitted := 0
			for range 3 {
				if e.do(t, call{}).code == codes.OK {
					admitted++
				}
			}
			clk.Set(T0.Add(5 * time.Second)) // 25 s back
			var a answer
			for range 5 {
				if a = e.do(t, call{}); a.code == codes.OK {
					admitted++
				}
				if _, _, err := e.openDuplex(t); err == nil {
					admitted++
				}
			}
			if admitted != 3 {
				t.Fatalf("admitted %d around the step back, want 3 (the limit)", admitted)
			}
			if a.retry == nil {
				t.Fatalf("denied after the step: %v %q, no RetryInfo", a.code, a.msg)
			}
			d := a.retry.GetRetryDelay().AsDuration()
			if d < 25*time.Second {
				t.Errorf("delay %v after a step back of 25 s: shorter than the step", d)
			}
			clk.Advance(d - time.Nanosecond)
			if b := e.do(t, call{}); b.code != codes.ResourceExhausted {
				t.Fatalf("1 ns before the delay %v: %v", d, b.code)
			}
			clk.Advance(time.Nanosecond)
			if b := e.do(t, call{}); b.code != codes.OK {
				t.Fatalf("after the delay %v: %v %q", d, b.code, b.msg)
			}
		})
	}
}
