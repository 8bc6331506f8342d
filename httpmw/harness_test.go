package httpmw

import (
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwtest"
)

// harness starts a real net/http server (httptest, on an ephemeral
// loopback port) with the middleware of a setup.
var harness = mwtest.Harness{Start: start, SurvivesPanics: true}

func start(t *testing.T, s mwtest.Setup) *mwtest.Target {
	t.Helper()
	cfg := Config{Options: s.Options}
	if s.CostHeader {
		cfg.Cost = func(r *http.Request) int {
			v := r.Header.Get("X-Cost")
			if v == "" {
				return 1
			}
			n, err := strconv.Atoi(v)
			if err != nil {
				return -1
			}
			return n
		}
	}
	if s.KeyFuncHeader != "" {
		name := s.KeyFuncHeader
		cfg.KeyFunc = func(r *http.Request) string { return r.Header.Get(name) }
	}
	if s.SkipPath != "" {
		cfg.Skip = func(r *http.Request) bool { return r.URL.Path == s.SkipPath }
	}
	if s.CustomDenied {
		cfg.Denied = func(w http.ResponseWriter, r *http.Request, d httplimit.Decision) {
			w.Header().Set("X-Denied-By", "custom")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte("custom denied\n"))
		}
	}
	if name := s.TierHeader; name != "" {
		cfg.Tier = func(r *http.Request) string { return r.Header.Get(name) }
	}
	if f := s.ErrorStatus; f != nil {
		cfg.ErrorStatus = func(_ *http.Request, err error) int { return f(err) }
	}
	if s.FinalCostField != "" {
		name := s.FinalCostField
		cfg.FinalCost = func(_ *http.Request, _ int, h http.Header, d httplimit.Decision) int {
			return mwtest.ParseReportedCost(h.Get(name), d.Cost)
		}
	}
	mw, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	app := http.Handler(http.HandlerFunc(okHandler))
	if s.App {
		app = http.HandlerFunc(outcomeApp)
	}
	srv := httptest.NewUnstartedServer(mw.Wrap(app))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panics OutcomePanics makes
	ln, v6 := mwtest.Listen(t, s.IPv6)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		mw.Close()
	})
	return &mwtest.Target{
		URL:       srv.URL,
		Reload:    mw.Reload,
		Stats:     mw.Stats,
		RuleStats: mw.RuleStats,
		Close:     mw.Close,
		IPv6:      v6,
	}
}

// outcomeApp is the outcome application (mwtest.Setup.App).
func outcomeApp(w http.ResponseWriter, r *http.Request) {
	if v := r.Header.Get(mwtest.AppReportCost); v != "" {
		w.Header().Set(mwtest.AppCostField, v)
	}
	// text/plain and nosniff, as mwtest.Check wants of every 4xx and 5xx.
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(mwtest.AppStatusOf(r.Header.Get))
	switch r.Header.Get(mwtest.AppPanic) {
	case "1":
		panic("outcome application: panic")
	case "abort":
		panic(http.ErrAbortHandler)
	}
	_, _ = w.Write([]byte("app\n"))
}

// okHandler is the application behind the middleware.
func okHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
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
	mw.Wrap(http.HandlerFunc(okHandler))
}
