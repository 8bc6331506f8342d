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

// A client denied twice within a minute on /login is banned for 15
// minutes: refused with Retry-After the rest of the ban, listed by Bans,
// until LiftBan. The clock is fixed so the output is deterministic.
func ExampleMiddleware_Bans() {
	rules, err := httplimit.ParseRules([]byte(`{"rules": [
		{"name": "login", "path": "/login", "limit": 1, "window": "1m",
		 "ban": {"after": 2, "within": "1m", "for": "15m"}}
	]}`))
	if err != nil {
		panic(err)
	}
	clock := shardlimit.NewManualClock(time.Unix(1_734_480_000, 0))
	mw, err := httpmw.New(httpmw.Config{Options: httplimit.Options{Rules: rules, Clock: clock}})
	if err != nil {
		panic(err)
	}
	defer mw.Close()
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	login := func() {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/login", nil)
		r.RemoteAddr = "192.0.2.7:4000"
		h.ServeHTTP(w, r)
		if ra := w.Header().Get("Retry-After"); ra != "" {
			fmt.Println(w.Code, "retry after", ra)
			return
		}
		fmt.Println(w.Code)
	}
	for range 3 {
		login()
	}
	clock.Advance(time.Minute)
	login() // a new window, but banned
	for _, b := range mw.Bans() {
		fmt.Println(b.Rule, b.Key, b.Remaining)
	}
	if _, err := mw.LiftBan("login", "ip:192.0.2.7"); err != nil {
		panic(err)
	}
	login()
	// Output:
	// 200
	// 429 retry after 60
	// 429 retry after 60
	// 429 retry after 840
	// login ip:192.0.2.7 14m0s
	// 200
}
