package httpmw_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/httpmw"
)

// Clients identified by X-Client-ID, client-1 in a tier of its own; an
// identity the rules do not list ("anonymous") is keyed by the client's
// address. The clock is fixed so the output is deterministic.
func Example() {
	rules, err := httplimit.ParseRules([]byte(`{
		"rules": [{"name": "foo", "path": "/foo", "algorithm": "fixed_window", "limit": 2, "window": "1m"}],
		"tiers": [{"name": "gold", "clients": ["client-1"], "rules": [
			{"name": "gold-foo", "path": "/foo", "algorithm": "fixed_window", "limit": 10, "window": "1m"}
		]}]
	}`))
	if err != nil {
		panic(err)
	}
	mw, err := httpmw.New(httpmw.Config{Options: httplimit.Options{
		Rules:   rules,
		Keys:    httplimit.KeyConfig{Header: "X-Client-ID"},
		Headers: httplimit.HeaderConfig{IETF: true}, // adds RateLimit-Policy and RateLimit to the X-RateLimit trio
		Clock:   shardlimit.NewManualClock(time.Unix(1_734_480_015, 0)),
	}})
	if err != nil {
		panic(err)
	}
	defer mw.Close()
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "foo")
	}))
	for _, client := range []string{"anonymous", "anonymous", "anonymous", "client-1"} {
		r := httptest.NewRequest("GET", "/foo", nil)
		r.Header.Set("X-Client-ID", client)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		line := fmt.Sprint(client, " ", w.Code, " remaining=", w.Header().Get("X-RateLimit-Remaining"), " ", w.Header().Get("RateLimit"))
		if ra := w.Header().Get("Retry-After"); ra != "" {
			line += " retry-after=" + ra
		}
		fmt.Println(line)
	}
	// Output:
	// anonymous 200 remaining=1 "foo";r=1;t=45
	// anonymous 200 remaining=0 "foo";r=0;t=45
	// anonymous 429 remaining=0 "foo";r=0;t=45 retry-after=45
	// client-1 200 remaining=9 "gold-foo";r=9;t=45
}
