package outbound_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/outbound"
)

// A client paced at 2 requests per second, failing fast, against a server
// whose /busy answers 429 with Retry-After: 30. The clock is a
// ManualClock, so the output is deterministic.
func Example() {
	clock := shardlimit.NewManualClock(time.Unix(1_734_480_000, 0))
	lim, err := shardlimit.New(shardlimit.Config{
		Algorithm: shardlimit.SlidingLog, Limit: 2, Window: time.Second, Clock: clock,
	})
	if err != nil {
		panic(err)
	}
	defer lim.Close()
	pacer, err := outbound.New(outbound.Config{Limiter: lim, FailFast: true})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	tr, err := outbound.NewTransport(outbound.TransportConfig{Pacer: pacer, Base: srv.Client().Transport})
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: tr}

	get := func(path string) {
		resp, err := client.Get(srv.URL + path)
		var le *outbound.LimitError
		switch {
		case errors.As(err, &le):
			fmt.Println(path, "not sent: held", errors.Is(err, outbound.ErrHeld), "retry in", le.RetryAfter)
		case err != nil:
			fmt.Println(path, err)
		default:
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			fmt.Println(path, resp.StatusCode)
		}
	}
	get("/")
	get("/")
	get("/") // the third in a second
	clock.Advance(time.Second)
	get("/busy") // the server says: not for 30 s
	get("/")
	clock.Advance(30 * time.Second)
	get("/")
	// Output:
	// / 200
	// / 200
	// / not sent: held false retry in 1s
	// /busy 429
	// / not sent: held true retry in 30s
	// / 200
}
