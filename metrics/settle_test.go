package metrics_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/httpmw"
	"github.com/shardlimit/shardlimit/internal/mwtest"
	"github.com/shardlimit/shardlimit/metrics"
)

// TestSettledFamilies checks the settlement families of a middleware
// rule that settles after the handler, and that rules that do not settle
// report none.
func TestSettledFamilies(t *testing.T) {
	mw, err := httpmw.New(httpmw.Config{Options: httplimit.Options{
		Rules: mwtest.MustRules(t, `{"rules": [
			{"name": "login", "path": "/login", "limit": 10, "window": "1m", "count": "failed"},
			{"name": "llm", "path": "/llm", "limit": 100, "window": "1m", "cost_header": "X-Tokens"},
			{"name": "plain", "path": "/plain", "limit": 10, "window": "1m"}
		]}`),
		Clock: shardlimit.NewManualClock(mwtest.T0),
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Close()
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get("X-Report"); v != "" {
			w.Header().Set("X-Tokens", v)
		}
	}))
	for _, req := range [][2]string{{"/login", ""}, {"/login", ""}, {"/llm", "40"}, {"/llm", "x"}, {"/plain", ""}} {
		r := httptest.NewRequest("GET", req[0], nil)
		r.Header.Set("X-Report", req[1])
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	var b bytes.Buffer
	if err := metrics.WriteText(&b, metrics.Middleware(mw)); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, line := range []string{
		`shardlimit_settled_units_total{kind="refunded",limiter="login"} 2`,
		`shardlimit_settled_units_total{kind="charged",limiter="login"} 0`,
		`shardlimit_settled_units_total{kind="charged",limiter="llm"} 39`,
		`shardlimit_settle_problems_total{kind="bad_report",limiter="llm"} 1`,
		`shardlimit_settle_problems_total{kind="refused",limiter="llm"} 0`,
	} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("no line %q in\n%s", line, text)
		}
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "shardlimit_settle") && strings.Contains(line, `limiter="plain"`) {
			t.Errorf("rule plain, which does not settle, reports %q", line)
		}
	}
}
