package metrics_test

import (
	"bytes"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/httpmw"
	"github.com/shardlimit/shardlimit/metrics"
)

// ExampleWithGroup reports every rule of a middleware as one series set:
// the decisions of /a and /b add up under limiter="all".
func ExampleWithGroup() {
	rules, err := httplimit.ParseRules([]byte(`{"rules": [
		{"name": "a", "path": "/a", "limit": 2, "window": "1m"},
		{"name": "b", "path": "/b", "limit": 1, "window": "1m"}]}`))
	if err != nil {
		log.Fatal(err)
	}
	clock := shardlimit.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	mw, err := httpmw.New(httpmw.Config{Options: httplimit.Options{Rules: rules, Clock: clock}})
	if err != nil {
		log.Fatal(err)
	}
	defer mw.Close()
	h := mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, path := range []string{"/a", "/a", "/a", "/b", "/b"} { // 3 allowed, 2 denied
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", path, nil))
	}
	var buf bytes.Buffer
	if err := metrics.WriteText(&buf, metrics.Middleware(mw, metrics.WithGroup(metrics.AllRules))); err != nil {
		log.Fatal(err)
	}
	for _, line := range strings.Split(buf.String(), "\n") {
		if strings.HasPrefix(line, "shardlimit_decisions_total") || strings.HasPrefix(line, "shardlimit_group_rules") {
			fmt.Println(line)
		}
	}
	// Output:
	// shardlimit_decisions_total{limiter="all",outcome="allowed"} 3
	// shardlimit_decisions_total{limiter="all",outcome="denied"} 2
	// shardlimit_group_rules{limiter="all"} 2
}
