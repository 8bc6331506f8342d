package httpmw

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/shardlimit/shardlimit/internal/mwtest"
)

// TestPolicies runs the cases of bans and concurrency limits over a real
// net/http server.
func TestPolicies(t *testing.T) { mwtest.RunPolicies(t, mwtest.PolicyHarness{Start: startPolicies}) }

// startPolicies starts a server with the application of
// mwtest.PolicyTarget behind the middleware of s.
func startPolicies(t *testing.T, s mwtest.Setup) *mwtest.PolicyTarget {
	t.Helper()
	cfg := Config{Options: s.Options}
	if f := s.ErrorStatus; f != nil {
		cfg.ErrorStatus = func(_ *http.Request, err error) int { return f(err) }
	}
	mw, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	tg := mwtest.NewPolicyTarget()
	tg.CtxCancel = true
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			tg.Entered <- r.URL.Path
			select {
			case <-tg.Release:
			case <-r.Context().Done():
			}
		case "/panic":
			panic(http.ErrAbortHandler)
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	inner := mw.Wrap(app)
	outer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			defer func() { tg.Exited <- r.URL.Path }()
		}
		inner.ServeHTTP(w, r)
	})
	srv := httptest.NewUnstartedServer(outer)
	ln, _ := mwtest.Listen(t, false)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Config.ErrorLog = nil
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		mw.Close()
	})
	tg.URL = srv.URL
	tg.Bans, tg.SetBan, tg.LiftBan, tg.InFlight, tg.PolicyStats = mw.Bans, mw.SetBan, mw.LiftBan, mw.InFlight, mw.PolicyStats
	return tg
}
