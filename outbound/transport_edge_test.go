package outbound

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
)

// idleSpy is a Base that answers 200 and records CloseIdleConnections.
type idleSpy struct {
	mu     sync.Mutex
	closed int
}

func (s *idleSpy) RoundTrip(req *http.Request) (*http.Response, error) {
	closeBody(req)
	return &http.Response{StatusCode: 200, Body: http.NoBody, Header: http.Header{}, Request: req}, nil
}

func (s *idleSpy) CloseIdleConnections() {
	s.mu.Lock()
	s.closed++
	s.mu.Unlock()
}

// http.Client.CloseIdleConnections reaches its Transport's only through
// the method of that name: a wrapper that lacks it leaves Base's idle
// connections (and their goroutines) open until they time out.
func TestTransportForwardsCloseIdleConnections(t *testing.T) {
	p, _ := newPacer(t, shardlimit.GCRA, 100, time.Second, Config{})
	spy := &idleSpy{}
	tr, err := NewTransport(TransportConfig{Pacer: p, Base: spy})
	if err != nil {
		t.Fatal(err)
	}
	(&http.Client{Transport: tr}).CloseIdleConnections()
	if spy.closed != 1 {
		t.Fatalf("Base's CloseIdleConnections called %d times, want 1", spy.closed)
	}
	// A Base without the method: nothing to forward, no panic.
	tr2, err := NewTransport(TransportConfig{Pacer: p, Base: cannedTransport{}})
	if err != nil {
		t.Fatal(err)
	}
	(&http.Client{Transport: tr2}).CloseIdleConnections()
}

// A key the limiter refuses (empty, too long) is an ErrInvalidKey, as
// that sentinel's doc says, whether Take, Hold or a Transport's Key
// produced it, waiting or failing fast.
func TestInvalidKeyIsErrInvalidKey(t *testing.T) {
	for _, failFast := range []bool{false, true} {
		p, _ := newPacer(t, shardlimit.GCRA, 100, time.Second, Config{FailFast: failFast})
		long := strings.Repeat("k", p.maxKey+1)
		for _, key := range []string{"", long} {
			if err := p.Take(context.Background(), key, 1); !errors.Is(err, ErrInvalidKey) {
				t.Errorf("failFast %v: Take of a %d-byte key = %v, want ErrInvalidKey", failFast, len(key), err)
			}
			if err := p.HoldFor(key, time.Second); !errors.Is(err, ErrInvalidKey) || !errors.Is(err, shardlimit.ErrInvalidKey) {
				t.Errorf("HoldFor of a %d-byte key = %v, want ErrInvalidKey", len(key), err)
			}
		}
		tr, err := NewTransport(TransportConfig{Pacer: p, Base: &idleSpy{},
			Key: func(*http.Request) (string, error) { return "", nil }})
		if err != nil {
			t.Fatal(err)
		}
		body := &countingBody{}
		req := httptest.NewRequestWithContext(context.Background(), "POST", "http://api.example.com/", body)
		if _, err := tr.RoundTrip(req); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("failFast %v: RoundTrip with an empty key = %v, want ErrInvalidKey", failFast, err)
		}
		if body.closes() != 1 || body.reads() != 0 {
			t.Errorf("body closed %d times, read %d times; want closed once, never read", body.closes(), body.reads())
		}
	}
}

// countingBody is a request body that counts its reads and closes.
type countingBody struct {
	mu            sync.Mutex
	r             *strings.Reader
	nRead, nClose int
}

func newCountingBody(s string) *countingBody { return &countingBody{r: strings.NewReader(s)} }

func (b *countingBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nRead++
	if b.r == nil {
		return 0, io.EOF
	}
	return b.r.Read(p)
}

func (b *countingBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nClose++
	return nil
}

func (b *countingBody) closes() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.nClose
}

func (b *countingBody) reads() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.nRead
}

// replayable returns a request whose body and every body its GetBody
// makes are counted, and the list of those bodies.
func replayable(t *testing.T, ctx context.Context, url string) (*http.Request, *[]*countingBody, *sync.Mutex) {
	t.Helper()
	var mu sync.Mutex
	bodies := []*countingBody{newCountingBody("payload")}
	req, err := http.NewRequestWithContext(ctx, "POST", url, bodies[0])
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len("payload"))
	req.GetBody = func() (io.ReadCloser, error) {
		mu.Lock()
		defer mu.Unlock()
		b := newCountingBody("payload")
		bodies = append(bodies, b)
		return b, nil
	}
	return req, &bodies, &mu
}

// awaitCloses waits until every body was closed at least once (the base
// transport may close a body after RoundTrip returns) and fails if one
// was closed more than once. It waits only for an event.
func awaitCloses(t *testing.T, bodies *[]*countingBody, mu *sync.Mutex, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		bs := append([]*countingBody(nil), (*bodies)...)
		mu.Unlock()
		all := len(bs) == want
		for i, b := range bs {
			if c := b.closes(); c > 1 {
				t.Fatalf("body %d closed %d times, want once", i, c)
			} else if c == 0 {
				all = false
			}
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d bodies made, want %d, each closed once", len(bs), want)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// Every body a retrying Transport holds, the caller's and each one
// GetBody makes, is closed exactly once: when the retry is sent, and
// when the retry's turn fails (the context ends during the hold).
func TestTransportRetryClosesEachBodyOnce(t *testing.T) {
	t.Run("retried", func(t *testing.T) {
		p, clock := newPacer(t, shardlimit.GCRA, 100, time.Second, Config{})
		srv, rs := startRefusingServer(t, clock, 429, 2)
		tr, err := NewTransport(TransportConfig{Pacer: p, Base: srv.Client().Transport, Retries: 2})
		if err != nil {
			t.Fatal(err)
		}
		req, bodies, mu := replayable(t, context.Background(), srv.URL)
		done := make(chan error, 1)
		var resp *http.Response
		go func() {
			var err error
			resp, err = tr.RoundTrip(req)
			done <- err
		}()
		driveUntil(t, clock, done)
		resp.Body.Close()
		if resp.StatusCode != 200 || len(rs.arrivals) != 3 {
			t.Fatalf("status %d after %d sends, want 200 after 3", resp.StatusCode, len(rs.arrivals))
		}
		awaitCloses(t, bodies, mu, 3)
	})
	t.Run("turn fails during the hold", func(t *testing.T) {
		p, clock := newPacer(t, shardlimit.GCRA, 100, time.Second, Config{})
		srv, _ := startRefusingServer(t, clock, 429, 1)
		tr, err := NewTransport(TransportConfig{Pacer: p, Base: srv.Client().Transport, Retries: 1})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		req, bodies, mu := replayable(t, ctx, srv.URL)
		done := make(chan error, 1)
		go func() {
			resp, err := tr.RoundTrip(req)
			if resp != nil {
				resp.Body.Close()
			}
			done <- err
		}()
		awaitSleepers(t, clock, 1) // the retry waits for the 5 s hold
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("RoundTrip = %v, want context.Canceled", err)
		}
		awaitCloses(t, bodies, mu, 2)
	})
}

// foreverServer answers every request 429 with Retry-After: after, and
// counts them.
func foreverServer(t *testing.T, after string) (*httptest.Server, func() int) {
	t.Helper()
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		mu.Unlock()
		w.Header().Set("Retry-After", after)
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	t.Cleanup(srv.Close)
	return srv, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// A server that answers 429 forever gets 1+Retries sends of a request,
// each after the hold of the previous answer, and the caller gets the
// last 429; with Retry-After: 0 the limiter alone paces the sends.
func TestTransportServerRefusingForever(t *testing.T) {
	for _, c := range []struct {
		after string
		gap   time.Duration // least time between two sends
	}{{"5", 5 * time.Second}, {"0", 0}, {"Thu, 01 Jan 1970 00:00:00 GMT", 0}} {
		t.Run(c.after, func(t *testing.T) {
			p, clock := newPacer(t, shardlimit.SlidingLog, 10, time.Second, Config{})
			srv, sends := foreverServer(t, c.after)
			const retries = 20
			var arrivals []time.Time
			var mu sync.Mutex
			base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
				mu.Lock()
				arrivals = append(arrivals, clock.Now())
				mu.Unlock()
				return srv.Client().Transport.RoundTrip(req)
			})
			tr, err := NewTransport(TransportConfig{Pacer: p, Base: base, Retries: retries})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			var resp *http.Response
			go func() {
				var err error
				resp, err = (&http.Client{Transport: tr}).Get(srv.URL)
				done <- err
			}()
			driveUntil(t, clock, done)
			resp.Body.Close()
			if resp.StatusCode != 429 || sends() != 1+retries {
				t.Fatalf("status %d after %d sends, want 429 after %d", resp.StatusCode, sends(), 1+retries)
			}
			for i := 1; i < len(arrivals); i++ {
				if gap := arrivals[i].Sub(arrivals[i-1]); gap < c.gap {
					t.Errorf("send %d came %v after the previous, want at least %v", i, gap, c.gap)
				}
			}
			for i := 10; i < len(arrivals); i++ {
				if span := arrivals[i].Sub(arrivals[i-10]); span < time.Second {
					t.Errorf("sends %d..%d within %v: more than the limit of 10 per second", i-10, i, span)
				}
			}
		})
	}
}

// roundTripFunc is a RoundTripper of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A retry goes out only when the hold covers the server's whole
// Retry-After: one cut to MaxHold would send it before the server's time,
// a request the server said it would refuse. The caller gets the answer.
func TestTransportNoRetryBeforeServersTime(t *testing.T) {
	p, clock := newPacer(t, shardlimit.GCRA, 100, time.Second, Config{MaxHold: 3 * time.Second})
	srv, rs := startRefusingServer(t, clock, 429, 1) // Retry-After: 5
	tr, err := NewTransport(TransportConfig{Pacer: p, Base: srv.Client().Transport, Retries: 1})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var resp *http.Response
	go func() {
		var err error
		resp, err = (&http.Client{Transport: tr}).Get(srv.URL)
		done <- err
	}()
	driveUntil(t, clock, done)
	resp.Body.Close()
	if resp.StatusCode != 429 || len(rs.arrivals) != 1 {
		t.Fatalf("status %d after %d sends (at %v), want the 429 after 1: the retry would go 2s before Retry-After", resp.StatusCode, len(rs.arrivals), rs.arrivals)
	}
	if until, held := p.Held(hostKeyOf(t, srv.URL)); !held || until.Sub(clock.Now()) != 3*time.Second {
		t.Fatalf("held %v until %v, want a hold cut to MaxHold (3s)", held, until)
	}
}

// hostKeyOf returns HostKey of a GET of url.
func hostKeyOf(t *testing.T, url string) string {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	k, err := HostKey(req)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// An http.Client follows a redirect through the Transport again: each
// hop takes a turn of its own key, and a 429 of the target holds the
// target, not the host that redirected; a later request's redirected hop
// waits for that hold.
func TestTransportRedirectHoldsTheTarget(t *testing.T) {
	p, clock := newPacer(t, shardlimit.GCRA, 100, time.Second, Config{})
	target, rs := startRefusingServer(t, clock, 429, 1) // Retry-After: 5
	var redirects int
	var mu sync.Mutex
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		redirects++
		mu.Unlock()
		http.Redirect(w, r, target.URL, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(origin.Close)
	tr, err := NewTransport(TransportConfig{Pacer: p, Base: origin.Client().Transport})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: tr}
	post := func() (int, error) {
		resp, err := client.Post(origin.URL, "text/plain", strings.NewReader("payload"))
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := post(); err != nil || code != 429 {
		t.Fatalf("first POST: %d %v, want the target's 429", code, err)
	}
	if _, held := p.Held(hostKeyOf(t, origin.URL)); held {
		t.Fatal("the redirecting host is held; only the target answered 429")
	}
	if until, held := p.Held(hostKeyOf(t, target.URL)); !held || until.Sub(clock.Now()) != 5*time.Second {
		t.Fatalf("target held %v until %v, want 5s", held, until)
	}
	done := make(chan error, 1)
	go func() {
		code, err := post()
		if err == nil && code != 200 {
			err = errors.New(http.StatusText(code))
		}
		done <- err
	}()
	driveUntil(t, clock, done)
	if redirects != 2 || len(rs.arrivals) != 2 || rs.arrivals[1] < 5*time.Second {
		t.Fatalf("%d redirects, target arrivals %v: want 2 and 2, the second after the hold (5s)", redirects, rs.arrivals)
	}
	if rs.bodies[1] != "payload" {
		t.Fatalf("the redirected POST carried %q, want the replayed body", rs.bodies[1])
	}
}

// A retry whose GetBody fails is not sent: RoundTrip returns an error
// wrapping GetBody's, and the caller's body was closed once (by Base).
func TestTransportRetryGetBodyError(t *testing.T) {
	p, clock := newPacer(t, shardlimit.GCRA, 100, time.Second, Config{})
	srv, rs := startRefusingServer(t, clock, 429, 1)
	tr, err := NewTransport(TransportConfig{Pacer: p, Base: srv.Client().Transport, Retries: 1})
	if err != nil {
		t.Fatal(err)
	}
	body := newCountingBody("payload")
	req, err := http.NewRequest("POST", srv.URL, body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len("payload"))
	cause := errors.New("body gone")
	req.GetBody = func() (io.ReadCloser, error) { return nil, cause }
	resp, err := tr.RoundTrip(req)
	if resp != nil {
		resp.Body.Close()
	}
	if !errors.Is(err, cause) || len(rs.arrivals) != 1 {
		t.Fatalf("RoundTrip = %v after %d sends, want GetBody's error after 1", err, len(rs.arrivals))
	}
	bodies := []*countingBody{body}
	var mu sync.Mutex
	awaitCloses(t, &bodies, &mu, 1)
}
