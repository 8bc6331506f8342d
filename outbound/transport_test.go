package outbound

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/httpmw"
)

// serverLog is what a limitedServer saw.
type serverLog struct {
	mu       sync.Mutex
	arrivals []time.Duration // each request's arrival, from t0 on the clock
	served   int             // requests the middleware let through
}

// limitedServer starts a real net/http server on 127.0.0.1 behind this
// repository's httpmw middleware: a fixed window of limit per minute per
// client address, on clock. It logs every request's arrival and counts
// the requests that reached the handler.
func limitedServer(t *testing.T, clock shardlimit.Clock, limit int) (*httptest.Server, *serverLog) {
	t.Helper()
	rules, err := httplimit.ParseRules([]byte(`{"rules": [{"name": "api", "prefix": "/", "algorithm": "fixed_window", "limit": ` +
		strconv.Itoa(limit) + `, "window": "1m"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpmw.New(httpmw.Config{Options: httplimit.Options{Rules: rules, Clock: clock}})
	if err != nil {
		t.Fatal(err)
	}
	log := &serverLog{}
	limited := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.mu.Lock()
		log.served++
		log.mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok\n")
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.mu.Lock()
		log.arrivals = append(log.arrivals, clock.Now().Sub(t0))
		log.mu.Unlock()
		limited.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.Close()
		mw.Close()
	})
	return srv, log
}

func get(t *testing.T, c *http.Client, url string) (int, error) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// The test: a client whose Transport paces at the server's limit
// gets one 429 (the server's window was partly spent by another client
// on the same address), holds the host for the Retry-After, and never
// gets another 429 while it sends 30 requests one after another. The
// ManualClock moves only while the client sleeps on it, so the verdict
// does not depend on the machine's speed.
func TestTransportKeepsClientUnderServerLimit(t *testing.T) {
	for _, alg := range []shardlimit.Algorithm{shardlimit.SlidingLog, shardlimit.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			p, clock := newPacer(t, alg, 10, time.Minute, Config{})
			srv, log := limitedServer(t, clock, 10)
			plain := srv.Client()
			for range 4 { // another client of the same address spends 4 of the window's 10
				if code, err := get(t, plain, srv.URL); err != nil || code != 200 {
					t.Fatalf("another client's request: %d %v", code, err)
				}
			}
			tr, err := NewTransport(TransportConfig{Pacer: p, Base: plain.Transport})
			if err != nil {
				t.Fatal(err)
			}
			client := &http.Client{Transport: tr}
			const n = 30
			codes := make([]int, n)
			done := make(chan error, 1)
			go func() {
				for i := range n {
					code, err := get(t, client, srv.URL)
					if err != nil {
						done <- err
						return
					}
					codes[i] = code
				}
				done <- nil
			}()
			driveUntil(t, clock, done)
			var tooMany []int
			for i, c := range codes {
				if c == http.StatusTooManyRequests {
					tooMany = append(tooMany, i)
				} else if c != http.StatusOK {
					t.Errorf("request %d: status %d", i, c)
				}
			}
			if len(tooMany) != 1 || tooMany[0] != 6 {
				t.Fatalf("429s at requests %v, want only the 7th (index 6): the server had 6 left", tooMany)
			}
			if len(log.arrivals) != 4+n || log.served != 4+n-1 {
				t.Fatalf("the server got %d requests and served %d, want %d and %d", len(log.arrivals), log.served, 4+n, 4+n-1)
			}
			if at := log.arrivals[4+7]; at < time.Minute {
				t.Fatalf("the client's request 7 arrived at %v, before the server's Retry-After (60s)", at)
			}
		})
	}
}

// driveUntil advances clock by a second whenever the one client goroutine
// sleeps on it, until done reports.
func driveUntil(t *testing.T, clock *shardlimit.ManualClock, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the client did not finish")
		}
		if clock.Sleepers() == 1 {
			clock.Advance(time.Second)
			continue
		}
		runtime.Gosched()
		time.Sleep(50 * time.Microsecond)
	}
}

// spyBody records whether a request body was read or closed.
type spyBody struct {
	mu           sync.Mutex
	read, closed bool
}

func (b *spyBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.read = true
	return 0, io.EOF
}

func (b *spyBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

func TestTransportFailFastNeverReadsBody(t *testing.T) {
	p, clock := newPacer(t, shardlimit.FixedWindow, 1, time.Minute, Config{FailFast: true})
	srv, log := limitedServer(t, clock, 100)
	tr, err := NewTransport(TransportConfig{Pacer: p, Base: srv.Client().Transport})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: tr}
	if code, err := get(t, client, srv.URL); err != nil || code != 200 {
		t.Fatalf("first request: %d %v", code, err)
	}
	body := &spyBody{}
	req, err := http.NewRequest("POST", srv.URL, body)
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.Do(req)
	var le *LimitError
	if !errors.Is(err, ErrLimited) || !errors.As(err, &le) || le.RetryAfter != time.Minute {
		t.Fatalf("second request = %v, want ErrLimited with RetryAfter 1m", err)
	}
	if body.read || !body.closed {
		t.Fatalf("body read %v, closed %v; want closed and never read", body.read, body.closed)
	}
	if len(log.arrivals) != 1 {
		t.Fatalf("the server got %d requests, want 1", len(log.arrivals))
	}
}

// answerServer answers every request with status and headers h.
func answerServer(t *testing.T, status int, h map[string]string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range h {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestTransportHoldsOnRetryAfter(t *testing.T) {
	cases := []struct {
		name   string
		status int
		h      map[string]string
		hold   time.Duration // 0: none
	}{
		{"429 delay-seconds", 429, map[string]string{"Retry-After": "7"}, 7 * time.Second},
		{"503 HTTP-date from Date", 503, map[string]string{
			"Date": "Wed, 21 Oct 2015 07:28:00 GMT", "Retry-After": "Wed, 21 Oct 2015 07:30:00 GMT"}, 2 * time.Minute},
		{"429 without Retry-After", 429, nil, 0},
		{"429 malformed Retry-After", 429, map[string]string{"Retry-After": "soon"}, 0},
		{"500 with Retry-After", 500, map[string]string{"Retry-After": "7"}, 0},
		{"200 with Retry-After", 200, map[string]string{"Retry-After": "7"}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, clock := newPacer(t, shardlimit.GCRA, 100, time.Second, Config{FailFast: true})
			srv := answerServer(t, c.status, c.h)
			tr, err := NewTransport(TransportConfig{Pacer: p, Base: srv.Client().Transport})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := tr.RoundTrip(httptest.NewRequestWithContext(context.Background(), "GET", srv.URL, nil))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: the Transport must hand the answer back, not retry", resp.StatusCode, c.status)
			}
			key, _ := HostKey(resp.Request)
			until, held := p.Held(key)
			if c.hold == 0 {
				if held {
					t.Fatalf("held until %v, want no hold", until)
				}
				return
			}
			if !held || until.Sub(clock.Now()) != c.hold {
				t.Fatalf("held %v for %v, want %v", held, until.Sub(clock.Now()), c.hold)
			}
			_, err = tr.RoundTrip(httptest.NewRequestWithContext(context.Background(), "GET", srv.URL, nil))
			if !errors.Is(err, ErrHeld) {
				t.Fatalf("request during the hold = %v, want ErrHeld", err)
			}
		})
	}
}

func TestTransportKeyError(t *testing.T) {
	p, _ := newPacer(t, shardlimit.GCRA, 100, time.Second, Config{})
	cause := errors.New("no tenant")
	tr, err := NewTransport(TransportConfig{Pacer: p, Base: http.DefaultTransport,
		Key: func(*http.Request) (string, error) { return "", cause }})
	if err != nil {
		t.Fatal(err)
	}
	body := &spyBody{}
	req := httptest.NewRequestWithContext(context.Background(), "POST", "http://127.0.0.1:1/", body)
	req.RequestURI = ""
	_, err = tr.RoundTrip(req)
	if !errors.Is(err, ErrInvalidKey) || !errors.Is(err, cause) {
		t.Fatalf("RoundTrip = %v, want ErrInvalidKey and the Key's error", err)
	}
	if body.read || !body.closed {
		t.Fatalf("body read %v, closed %v; want closed and never read", body.read, body.closed)
	}
}

func TestHostKey(t *testing.T) {
	for in, want := range map[string]string{
		"https://API.Example.com:443/x": "api.example.com",
		"https://api.example.com/x":     "api.example.com",
		"https://api.example.com:8443/": "api.example.com:8443",
		"http://api.example.com:80/":    "api.example.com",
		"http://api.example.com:443/":   "api.example.com:443",
		"http://[::1]:80/":              "[::1]",
		"http://[::1]:8080/":            "[::1]:8080",
	} {
		req, err := http.NewRequest("GET", in, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := HostKey(req); err != nil || got != want {
			t.Errorf("HostKey(%s) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := HostKey(&http.Request{URL: nil}); err == nil {
		t.Error("HostKey of a request without URL: no error")
	}
}

func TestRetryDelay(t *testing.T) {
	now := time.Date(2015, 10, 21, 7, 28, 0, 0, time.UTC)
	cases := []struct {
		retryAfter, date string
		want             time.Duration
		ok               bool
	}{
		{"120", "", 120 * time.Second, true},
		{" 3 ", "", 3 * time.Second, true},
		{"0", "", 0, true},
		{"1.5", "", 2 * time.Second, true},
		{"2.0", "", 2 * time.Second, true},
		{"99999999999999999999999", "", time.Duration(maxDelaySeconds) * time.Second, true},
		{"-1", "", 0, false},
		{"1.", "", 0, false},
		{".5", "", 0, false},
		{"1e3", "", 0, false},
		{"soon", "", 0, false},
		{"", "", 0, false},
		{"Wed, 21 Oct 2015 07:30:00 GMT", "", 2 * time.Minute, true},                          // IMF-fixdate, from now
		{"Wednesday, 21-Oct-15 07:30:00 GMT", "", 2 * time.Minute, true},                      // RFC 850
		{"Wed Oct 21 07:30:00 2015", "", 2 * time.Minute, true},                               // asctime
		{"Wed, 21 Oct 2015 07:30:00 GMT", "Wed, 21 Oct 2015 07:29:00 GMT", time.Minute, true}, // from Date
		{"Wed, 21 Oct 2015 07:00:00 GMT", "", 0, true},                                        // past
		{"Wed, 21 Oct 2015 07:30:00 GMT", "not a date", 2 * time.Minute, true},                // bad Date: from now
	}
	for _, c := range cases {
		h := http.Header{}
		if c.retryAfter != "" {
			h.Set("Retry-After", c.retryAfter)
		}
		if c.date != "" {
			h.Set("Date", c.date)
		}
		got, ok := RetryDelay(h, now)
		if got != c.want || ok != c.ok {
			t.Errorf("RetryDelay(%q, Date %q) = %v %v, want %v %v", c.retryAfter, c.date, got, ok, c.want, c.ok)
		}
	}
}

// A request without a URL is refused with an error, not a panic.
func TestTransportRequestWithoutURL(t *testing.T) {
	p, _ := newPacer(t, shardlimit.GCRA, 10, time.Second, Config{})
	tr, err := NewTransport(TransportConfig{Pacer: p})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.RoundTrip(&http.Request{Method: "GET"}); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("RoundTrip of a request without URL = %v, want ErrInvalidKey", err)
	}
}

// FuzzRetryDelay: any Retry-After and Date give a delay that is never
// negative, and no panic.
func FuzzRetryDelay(f *testing.F) {
	for _, s := range []string{"120", "1.5", "Wed, 21 Oct 2015 07:28:00 GMT", "-1", "99999999999999999999", ""} {
		f.Add(s, "Wed, 21 Oct 2015 07:00:00 GMT")
	}
	f.Fuzz(func(t *testing.T, retryAfter, date string) {
		h := http.Header{"Retry-After": {retryAfter}, "Date": {date}}
		d, ok := RetryDelay(h, t0)
		if d < 0 || !ok && d != 0 {
			t.Fatalf("RetryDelay(%q, %q) = %v %v", retryAfter, date, d, ok)
		}
	})
}

// Several goroutines share one Transport. The server has 2 of its 10
// left; the client's own budget would send 10. Only the requests already
// past the hold check when the first 429 comes back (one per goroutine at
// most) may get 429s too, all at the instant the server's window ran
// out, and none after: the hold, not the client's budget (which would
// allow 8 429s), stops them, and the pacing keeps every later request
// under the server's limit. The clock moves only while every client
// goroutine sleeps on it, so no request is in flight while it moves.
func TestTransportConcurrentClientsUnderServerLimit(t *testing.T) {
	p, clock := newPacer(t, shardlimit.SlidingLog, 10, time.Minute, Config{})
	srv, log := limitedServer(t, clock, 10)
	for range 8 { // another client of the same address spends 8 of the window's 10
		if code, err := get(t, srv.Client(), srv.URL); err != nil || code != 200 {
			t.Fatalf("another client's request: %d %v", code, err)
		}
	}
	tr, err := NewTransport(TransportConfig{Pacer: p, Base: srv.Client().Transport})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: tr}
	const goroutines, each = 4, 8
	type answer struct {
		at   time.Duration
		code int
	}
	answers := make(chan answer, goroutines*each)
	var active atomic.Int64
	active.Store(goroutines)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			defer active.Add(-1)
			for range each {
				code, err := get(t, client, srv.URL)
				if err != nil {
					t.Error(err)
					return
				}
				answers <- answer{clock.Now().Sub(t0), code}
			}
		})
	}
	deadline := time.Now().Add(time.Minute)
	for active.Load() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the clients did not finish")
		}
		if n := active.Load(); n > 0 && int64(clock.Sleepers()) == n {
			clock.Advance(time.Second)
			continue
		}
		runtime.Gosched()
		time.Sleep(50 * time.Microsecond)
	}
	wg.Wait()
	close(answers)
	tooMany := 0
	for a := range answers {
		if a.code == http.StatusTooManyRequests {
			tooMany++
			if a.at != 0 {
				t.Errorf("a 429 at %v, after the first one's hold", a.at)
			}
		} else if a.code != http.StatusOK {
			t.Errorf("status %d at %v", a.code, a.at)
		}
	}
	if tooMany < 1 || tooMany > goroutines {
		t.Fatalf("%d 429s, want 1 to %d (one per request in flight when the first came back)", tooMany, goroutines)
	}
	if len(log.arrivals) != 8+goroutines*each {
		t.Fatalf("the server got %d requests, want %d", len(log.arrivals), 8+goroutines*each)
	}
}
