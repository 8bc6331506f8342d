package mwtest

import (
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// ConcurrencyErrorPass checks that a request whose rate decision failed
// (the limiter's table is full) and that the error hook lets through
// (httplimit.ErrorPass) holds an in-flight slot like any request that
// reaches the handler, as it does under OnError FailOpen: the cap still
// holds for it.
func ConcurrencyErrorPass(t *testing.T, h PolicyHarness) {
	tg := h.Start(t, Setup{
		ErrorStatus: func(error) int { return httplimit.ErrorPass },
		Options: httplimit.Options{
			Rules:   concurrencyRules(t, 1, 503),
			Keys:    httplimit.KeyConfig{TrustedProxies: Loopback},
			Limiter: shardlimit.Config{Shards: 1, MaxKeys: 1, WhenFull: shardlimit.RejectNewKeys},
		},
	})
	c := NewClient(t, tg.URL, 2)
	Check(t, "the client that fills the table", c.Get("/other", XFF("192.0.2.1")...), 200, nil)
	status := make(chan int, 1)
	go func() {
		r, err := c.Do("GET", "/slow", XFF("192.0.2.2")...)
		if err != nil {
			t.Error(err)
		}
		status <- r.Status
	}()
	recv(t, "the slow handler", tg.Entered)
	n := tg.InFlight("r", "ip:192.0.2.2")
	r := c.Get("/other", XFF("192.0.2.2")...)
	tg.Release <- struct{}{}
	recv(t, "the slow handler's exit", tg.Exited)
	if st := <-status; st != 200 {
		t.Errorf("the slow request: %d, want 200 (passed by the error hook)", st)
	}
	if n != 1 {
		t.Errorf("%d in flight while the slow request ran, want 1", n)
	}
	if r.Status != 503 {
		t.Errorf("a second request while one was in flight: %d %q, want 503 (the cap is 1)", r.Status, r.Body)
	}
	if n := tg.InFlight("r", "ip:192.0.2.2"); n != 0 {
		t.Errorf("%d in flight after the handlers returned", n)
	}
}

// settlingLimiter gives a limiter a Settle method that settles nothing,
// so that rules counting by outcome can be built on it; what is settled
// does not matter to the in-flight cases.
type settlingLimiter struct{ shardlimit.Limiter }

// Settle settles nothing.
func (settlingLimiter) Settle(string, time.Time, int) error { return nil }

// ConcurrencySettled checks that a request settled after its handler (its
// rule counts by outcome) gives its in-flight slot back when the handler
// returns, like any other.
func ConcurrencySettled(t *testing.T, h PolicyHarness) {
	tg := h.Start(t, Setup{Options: httplimit.Options{
		Rules: MustRules(t, `{"rules": [{"name": "r", "prefix": "/", "limit": 1000, "window": "1m", "count": "failed",
			"concurrency": {"limit": 1, "status": 429, "retry_after": "3s"}}]}`),
		NewLimiter: func(_ string, cfg shardlimit.Config) (shardlimit.Limiter, error) {
			l, err := shardlimit.New(cfg)
			return settlingLimiter{l}, err
		},
	}})
	c := NewClient(t, tg.URL, 1)
	for i := range 3 {
		Check(t, "sequential request", c.Get("/other"), 200, nil)
		if n := tg.InFlight("r", "ip:127.0.0.1"); n != 0 {
			t.Fatalf("request %d: %d in flight after its handler returned", i, n)
		}
	}
}
