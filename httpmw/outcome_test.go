package httpmw

import (
	"net/http"
	"net/http/httptest"
	"testing"

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

// serveOnce serves GET path from 192.0.2.1 through h into a recorder.
func serveOnce(h http.Handler, path string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", path, nil)
	r.RemoteAddr = "192.0.2.1:40000"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// lastDelta returns the delta of rec's last call, 0 if none, and the
// number of calls.
func lastDelta(rec *mwtest.SettleRecorder) (int, int) {
	c := rec.Calls()
	if len(c) == 0 {
		return 0, 0
	}
	return c[len(c)-1].Delta, len(c)
}

// TestOutcomeWriter checks what the handler's writer records and removes:
// the status (informational 103 passed on, not taken for the final one;
// none written is 200), the cost header set before the header is written
// (removed from the response) or after the body (never sent), and Flush
// and Unwrap reaching the server's writer.
func TestOutcomeWriter(t *testing.T) {
	rec := &mwtest.SettleRecorder{}
	mw := outcomeMW(t, `{"rules": [
		{"name": "f", "path": "/f", "limit": 100, "window": "1m", "count": "failed"},
		{"name": "c", "path": "/c", "limit": 100, "window": "1m", "cost_header": "X-Units"}
	]}`, rec, Config{})
	for _, tc := range []struct {
		name, path string
		app        http.HandlerFunc
		status     int // what the client gets
		delta      int // 0: no call
	}{
		{"103 then 404 counts", "/f", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusNotFound)
		}, 103, 0}, // httptest.ResponseRecorder keeps the first status it is given
		{"103 then 200 refunded", "/f", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusEarlyHints)
			_, _ = w.Write([]byte("ok"))
		}, 103, -1},
		{"nothing written refunded", "/f", func(http.ResponseWriter, *http.Request) {}, 200, -1},
		{"flushed 500 counts", "/f", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(500)
			w.(http.Flusher).Flush()
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("ResponseController.Flush: %v", err)
			}
		}, 500, 0},
		{"cost before the header", "/c", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("x-units", "4")
			_, _ = w.Write([]byte("ok"))
		}, 200, 3},
		{"cost after the body", "/c", func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte("ok"))
			w.Header().Set("X-Units", "9")
		}, 200, 8},
		{"cost set twice", "/c", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Units", "9")
			w.WriteHeader(201)
			w.Header().Set("X-Units", "0")
		}, 201, -1},
	} {
		_, before := lastDelta(rec)
		w := serveOnce(mw.Wrap(tc.app), tc.path)
		delta, n := lastDelta(rec)
		if w.Code != tc.status || w.Header().Get("X-Units") != "" {
			t.Errorf("%s: status %d, X-Units %q; want %d, none", tc.name, w.Code, w.Header().Get("X-Units"), tc.status)
		}
		switch {
		case tc.delta == 0 && n != before:
			t.Errorf("%s: settled %d, want no call", tc.name, delta)
		case tc.delta != 0 && (n != before+1 || delta != tc.delta):
			t.Errorf("%s: %d calls, last delta %d; want one of %d", tc.name, n-before, delta, tc.delta)
		}
	}
}

// TestPanicSettledAsFailure checks that a handler that panics, with a
// plain value or http.ErrAbortHandler, is settled as a response of status
// 500 (refunded under "successful", counted under "failed"), and that its
// panic reaches the server unchanged.
func TestPanicSettledAsFailure(t *testing.T) {
	rec := &mwtest.SettleRecorder{}
	mw := outcomeMW(t, `{"rules": [
		{"name": "ok", "path": "/ok", "limit": 5, "window": "1m", "count": "successful"},
		{"name": "fail", "path": "/fail", "limit": 5, "window": "1m", "count": "failed"}
	]}`, rec, Config{})
	for _, v := range []any{"boom", http.ErrAbortHandler} {
		h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(200)
			panic(v)
		}))
		for _, path := range []string{"/ok", "/fail"} {
			func() {
				defer func() {
					if got := recover(); got != v {
						t.Errorf("%s: recovered %v, want %v", path, got, v)
					}
				}()
				serveOnce(h, path)
			}()
		}
	}
	calls := rec.Calls()
	if len(calls) != 2 || calls[0].Rule != "ok" || calls[0].Delta != -1 || calls[1].Rule != "ok" || calls[1].Delta != -1 {
		t.Errorf("Settle calls %+v, want two refunds of 1 on rule ok", calls)
	}
}

// TestFinalCostHook checks what the net/http final cost hook is given
// (the status, the header, the decision) and that its result settles.
func TestFinalCostHook(t *testing.T) {
	rec := &mwtest.SettleRecorder{}
	mw := outcomeMW(t, `{"rules": [{"name": "r", "limit": 100, "window": "1m"}]}`, rec, Config{
		FinalCost: func(r *http.Request, status int, h http.Header, d httplimit.Decision) int {
			if status != 202 || h.Get("X-App") != "yes" || d.Rule != "r" || d.Cost != 1 || r.URL.Path != "/x" {
				t.Errorf("FinalCost given %d, %v, %+v", status, h, d)
			}
			return 12
		},
	})
	serveOnce(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-App", "yes")
		w.WriteHeader(202)
	})), "/x")
	if d, n := lastDelta(rec); n != 1 || d != 11 {
		t.Errorf("%d calls, delta %d; want one of 11", n, d)
	}
	if st := mw.Stats().Settled; st.Charged != 11 {
		t.Errorf("Settled %+v, want 11 charged", st)
	}
}
