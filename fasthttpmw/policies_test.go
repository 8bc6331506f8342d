package fasthttpmw

import (
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shardlimit/shardlimit/internal/mwtest"
)

// TestPolicies runs the cases of bans and concurrency limits over a real
// fasthttp server.
func TestPolicies(t *testing.T) { mwtest.RunPolicies(t, mwtest.PolicyHarness{Start: startPolicies}) }

// startPolicies starts a server with the application of
// mwtest.PolicyTarget behind the middleware of s, and outside it a
// wrapper that answers a panic with 500 (fasthttp does not recover
// panics) and reports on Exited.
func startPolicies(t *testing.T, s mwtest.Setup) *mwtest.PolicyTarget {
	t.Helper()
	cfg := Config{Options: s.Options}
	if f := s.ErrorStatus; f != nil {
		cfg.ErrorStatus = func(_ *fasthttp.RequestCtx, err error) int { return f(err) }
	}
	mw, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	tg := mwtest.NewPolicyTarget()
	app := func(ctx *fasthttp.RequestCtx) {
		switch string(ctx.Path()) {
		case "/slow":
			tg.Entered <- "/slow"
			<-tg.Release
		case "/panic":
			panic("handler panic")
		}
		ctx.SetBodyString("ok\n")
	}
	inner := mw.Wrap(app)
	outer := func(ctx *fasthttp.RequestCtx) {
		defer func() {
			if string(ctx.Path()) == "/slow" {
				tg.Exited <- "/slow"
			}
			if recover() != nil {
				ctx.Error("panic\n", fasthttp.StatusInternalServerError)
			}
		}()
		inner(ctx)
	}
	ln, _ := mwtest.Listen(t, false)
	srv := &fasthttp.Server{Handler: outer, MaxIdleWorkerDuration: 50 * time.Millisecond}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		if err := srv.Shutdown(); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		mw.Close()
	})
	tg.URL = "http://" + ln.Addr().String()
	tg.Bans, tg.SetBan, tg.LiftBan, tg.InFlight, tg.PolicyStats = mw.Bans, mw.SetBan, mw.LiftBan, mw.InFlight, mw.PolicyStats
	return tg
}
