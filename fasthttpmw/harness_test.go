package fasthttpmw

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwtest"
)

// harness starts the real fasthttp server on an ephemeral loopback port
// (net.Listen + fasthttp.Server.Serve) with the middleware of a setup.
var harness = mwtest.Harness{Start: start}

func start(t *testing.T, s mwtest.Setup) *mwtest.Target {
	t.Helper()
	cfg := Config{Options: s.Options}
	if s.CostHeader {
		cfg.Cost = func(ctx *fasthttp.RequestCtx) int {
			v := ctx.Request.Header.Peek("X-Cost")
			if len(v) == 0 {
				return 1
			}
			n, err := strconv.Atoi(string(v))
			if err != nil {
				return -1
			}
			return n
		}
	}
	if s.KeyFuncHeader != "" {
		name := s.KeyFuncHeader
		cfg.KeyFunc = func(ctx *fasthttp.RequestCtx, dst []byte) []byte {
			return append(dst, ctx.Request.Header.Peek(name)...)
		}
	}
	if s.SkipPath != "" {
		cfg.Skip = func(ctx *fasthttp.RequestCtx) bool { return string(ctx.Path()) == s.SkipPath }
	}
	if s.CustomDenied {
		cfg.Denied = func(ctx *fasthttp.RequestCtx, d httplimit.Decision) {
			ctx.Response.Header.Set("X-Denied-By", "custom")
			ctx.SetBodyString("custom denied\n")
		}
	}
	if name := s.TierHeader; name != "" {
		cfg.Tier = func(ctx *fasthttp.RequestCtx) string { return string(ctx.Request.Header.Peek(name)) }
	}
	if f := s.ErrorStatus; f != nil {
		cfg.ErrorStatus = func(_ *fasthttp.RequestCtx, err error) int { return f(err) }
	}
	if s.FinalCostField != "" {
		name := s.FinalCostField
		cfg.FinalCost = func(ctx *fasthttp.RequestCtx, d httplimit.Decision) int {
			return mwtest.ParseReportedCost(string(ctx.Response.Header.Peek(name)), d.Cost)
		}
	}
	mw, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	app := fasthttp.RequestHandler(okHandler)
	if s.App {
		app = outcomeApp
	}
	ln, v6 := mwtest.Listen(t, s.IPv6)
	// fasthttp's worker-pool cleaner notices Shutdown only after sleeping
	// MaxIdleWorkerDuration (10 s by default); keep it short so goleak
	// sees every goroutine gone.
	srv := &fasthttp.Server{Handler: mw.Wrap(app), MaxIdleWorkerDuration: 50 * time.Millisecond}
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
	return &mwtest.Target{
		URL:       "http://" + ln.Addr().String(),
		Reload:    mw.Reload,
		Stats:     mw.Stats,
		RuleStats: mw.RuleStats,
		Close:     mw.Close,
		IPv6:      v6,
	}
}

// outcomeApp is the outcome application (mwtest.Setup.App). fasthttp's
// server does not recover a panicking handler: tests that make it panic
// call the wrapped handler themselves.
func outcomeApp(ctx *fasthttp.RequestCtx) {
	h := &ctx.Request.Header
	if v := h.Peek(mwtest.AppReportCost); len(v) > 0 {
		ctx.Response.Header.SetBytesV(mwtest.AppCostField, v)
	}
	// text/plain and nosniff, as mwtest.Check wants of every 4xx and 5xx.
	ctx.SetContentType("text/plain; charset=utf-8")
	ctx.Response.Header.Set("X-Content-Type-Options", "nosniff")
	ctx.SetStatusCode(mwtest.AppStatusOf(func(k string) string { return string(h.Peek(k)) }))
	if len(h.Peek(mwtest.AppPanic)) > 0 {
		panic("outcome application: panic")
	}
	ctx.SetBodyString("app\n")
}

// okHandler is the application behind the middleware.
func okHandler(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("text/plain; charset=utf-8")
	ctx.SetBodyString("ok\n")
}

// TestNewWithoutRules checks that New refuses a config without rules with
// ErrNoRules, and that Wrap on the nil Middleware it returned panics when
// the server is set up, not on its first request.
func TestNewWithoutRules(t *testing.T) {
	for _, rules := range []*httplimit.Rules{nil, {}} {
		mw, err := New(Config{Options: httplimit.Options{Rules: rules}})
		if !errors.Is(err, httplimit.ErrNoRules) || !errors.Is(err, shardlimit.ErrInvalidConfig) || mw != nil {
			t.Fatalf("New with rules %v: %v, %v; want ErrNoRules", rules, mw, err)
		}
	}
	var mw *Middleware
	defer func() {
		if recover() == nil {
			t.Error("Wrap on a nil Middleware did not panic")
		}
	}()
	mw.Wrap(okHandler)
}
