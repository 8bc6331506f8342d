package grpclimit

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/shardlimit/shardlimit/httplimit"
)

// TestBanRetryInfoAdmits: a client banned for a time shorter than its
// limit's own wait gets a RetryInfo (and retry-after) whose delay, waited,
// admits its next call: the later of the ban's end and the limit's.
func TestBanRetryInfoAdmits(t *testing.T) {
	clk := manual(0)
	e := start(t, setup{cfg: ServerConfig{Options: httplimit.Options{Clock: clk,
		Rules: rules(httplimit.Rule{Name: "svc", Prefix: service, Limit: 2, Window: time.Minute,
			Ban: &httplimit.Ban{After: 1, Within: time.Minute, For: 5 * time.Second}})}}})
	e.run(t, []call{{want: ok}, {want: ok}, {want: res}}) // the denial bans
	clk.Advance(time.Second)
	a := e.do(t, call{})
	if a.code != codes.ResourceExhausted || a.retry == nil {
		t.Fatalf("banned: %v %q, RetryInfo %v", a.code, a.msg, a.retry)
	}
	d := a.retry.GetRetryDelay().AsDuration()
	clk.Advance(d)
	if b := e.do(t, call{}); b.code != codes.OK {
		t.Errorf("after the banned call's delay %v: %v %q, want OK", d, b.code, b.msg)
	}
}
