package fasthttpmw

import (
	"net"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwtest"
)

// outcomeMW returns a middleware over rules js whose limiters record
// their Settle calls in rec.
func outcomeMW(t testing.TB, js string, rec *mwtest.SettleRecorder, cfg Config) *Middleware {
	t.Helper()
	cfg.Rules = mwtest.MustRules(t, js)
	cfg.Clock = shardlimit.NewManualClock(mwtest.T0)
	cfg.NewLimiter = rec.NewLimiter
	mw, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mw.Close() })
	return mw
}

// outcomeCtx returns a RequestCtx for GET path from 192.0.2.1.
func outcomeCtx(path string) *fasthttp.RequestCtx {
	var req fasthttp.Request
	req.SetRequestURI(path)
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 40000}, nil)
	return &ctx
}

// TestPanicSettledAsFailure checks that a handler that panics is settled
// as a response of status 500 (refunded under "successful", counted
// under "failed") and that its panic reaches the caller unchanged:
// fasthttp's server does not recover panics, so this runs the wrapped
// handler without a server.
func TestPanicSettledAsFailure(t *testing.T) {
	rec := &mwtest.SettleRecorder{}
	mw := outcomeMW(t, `{"rules": [
		{"name": "ok", "path": "/ok", "limit": 5, "window": "1m", "count": "successful"},
		{"name": "fail", "path": "/fail", "limit": 5, "window": "1m", "count": "failed"}
	]}`, rec, Config{})
	type boom struct{}
	h := mw.Wrap(func(ctx *fasthttp.RequestCtx) {
		ctx.SetStatusCode(200)
		panic(boom{})
	})
	for _, path := range []string{"/ok", "/fail"} {
		func() {
			defer func() {
				if v := recover(); v != (boom{}) {
					t.Errorf("%s: recovered %v, want the handler's panic", path, v)
				}
			}()
			h(outcomeCtx(path))
		}()
	}
	calls := rec.Calls()
	if len(calls) != 1 || calls[0].Rule != "ok" || calls[0].Delta != -1 || !calls[0].At.Equal(mwtest.T0) {
		t.Errorf("Settle calls %+v, want one refund of 1 on rule ok at T0", calls)
	}
}

// TestCostHeaderRemoved checks that the rule's cost header is read from
// the response and removed from it, case-insensitively, and that the
// final cost hook is asked only when the response lacks the header (a bad
// value is counted, and the cost decided stands).
func TestCostHeaderRemoved(t *testing.T) {
	rec := &mwtest.SettleRecorder{}
	hooked := 0
	mw := outcomeMW(t, `{"rules": [{"name": "c", "limit": 100, "window": "1m", "cost_header": "x-units"}]}`, rec, Config{
		FinalCost: func(ctx *fasthttp.RequestCtx, d httplimit.Decision) int {
			hooked++
			return d.Cost + 10
		},
	})
	report := ""
	h := mw.Wrap(func(ctx *fasthttp.RequestCtx) {
		if report != "" {
			ctx.Response.Header.Set("X-UNITS", report)
		}
		ctx.SetBodyString("ok")
	})
	for _, tc := range []struct {
		report string
		delta  int // 0: no call
		hooked int
	}{{"7", 6, 0}, {"", 10, 1}, {"junk", 0, 0}} {
		report = tc.report
		ctx := outcomeCtx("/")
		h(ctx)
		if v := ctx.Response.Header.Peek("X-Units"); v != nil {
			t.Errorf("report %q: X-Units %q still in the response", tc.report, v)
		}
		calls := rec.Calls()
		last := 0
		if len(calls) > 0 {
			last = calls[len(calls)-1].Delta
		}
		if hooked != tc.hooked || tc.delta != 0 && last != tc.delta {
			t.Errorf("report %q: hook asked %d times, last delta %d; want %d, %d", tc.report, hooked, last, tc.hooked, tc.delta)
		}
		hooked = 0
	}
	if len(rec.Calls()) != 2 || mw.Stats().Settled.BadReports != 1 {
		t.Errorf("calls %+v, Settled %+v; want 2 calls, 1 bad report", rec.Calls(), mw.Stats().Settled)
	}
}
