//go:build !race

package httpmw

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwtest"
)

// TestPolicyAllocs checks that with 10,000 networks on the exempt and deny
// lists and a shadow rule beside the enforced one, the allowed path
// allocates what it does without them (TestAllocs: the fields' string and
// array), an exempt request nothing (it gets no field), and a 403 only the
// array of its Content-Type and nosniff.
func TestPolicyAllocs(t *testing.T) {
	mw, err := New(Config{Options: httplimit.Options{Rules: mwtest.ListRules(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Close()
	h := mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, tc := range []struct {
		peer   string
		status int
		want   float64
	}{
		{"192.0.2.1:40000", 200, 2},
		{"[2001:db8:ffff::1]:40000", 200, 2},
		{"10.3.7.9:40000", 200, 0},
		{"11.3.7.9:40000", 403, 1},
	} {
		r := httptest.NewRequest("GET", "/open", nil)
		r.RemoteAddr = tc.peer
		w := &statusWriter{h: http.Header{}}
		h.ServeHTTP(w, r)
		n := testing.AllocsPerRun(1000, func() {
			clear(w.h)
			h.ServeHTTP(w, r)
		})
		if n != tc.want {
			t.Errorf("%s: %v allocs per request, want %v", tc.peer, n, tc.want)
		}
		if w.status != tc.status && !(tc.status == 200 && w.status == 0) {
			t.Errorf("%s: status %d, want %d", tc.peer, w.status, tc.status)
		}
	}
}

// statusWriter is a nopWriter that records the status.
type statusWriter struct {
	h      http.Header
	status int
}

func (w *statusWriter) Header() http.Header         { return w.h }
func (w *statusWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *statusWriter) WriteHeader(code int)        { w.status = code }
