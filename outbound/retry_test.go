package outbound

import (
	"bytes"
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

// refusingServer answers its first refusals requests status with
// Retry-After: 5, then 200. It logs each request's arrival on clock and
// body.
type refusingServer struct {
	mu       sync.Mutex
	arrivals []time.Duration
	bodies   []string
}

func startRefusingServer(t *testing.T, clock shardlimit.Clock, status, refusals int) (*httptest.Server, *refusingServer) {
	t.Helper()
	rs := &refusingServer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rs.mu.Lock()
		rs.arrivals = append(rs.arrivals, clock.Now().Sub(t0))
		rs.bodies = append(rs.bodies, string(b))
		n := len(rs.arrivals)
		rs.mu.Unlock()
		if n <= refusals {
			w.Header().Set("Retry-After", "5")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, "slow down\n")
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	}))
	t.Cleanup(srv.Close)
	return srv, rs
}

func TestTransportRetries(t *testing.T) {
	cases := []struct {
		name              string
		method            string
		body              func() io.Reader // nil: no body
		status, refusals  int
		retries           int
		wantStatus, sends int
	}{
		{"GET 429 retried", "GET", nil, 429, 1, 1, 200, 2},
		{"GET 429 twice, one retry", "GET", nil, 429, 2, 1, 429, 2},
		{"GET 429 twice, two retries", "GET", nil, 429, 2, 2, 200, 3},
		{"no retries by default", "GET", nil, 429, 1, 0, 429, 1},
		{"POST 429 replays the body", "POST", func() io.Reader { return strings.NewReader("payload") }, 429, 1, 1, 200, 2},
		{"POST 503 not retried", "POST", func() io.Reader { return strings.NewReader("payload") }, 503, 1, 1, 503, 1},
		{"PUT 503 retried", "PUT", func() io.Reader { return bytes.NewBufferString("payload") }, 503, 1, 1, 200, 2},
		{"body without GetBody not retried", "POST", func() io.Reader { return io.MultiReader(strings.NewReader("payload")) }, 429, 1, 1, 429, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, clock := newPacer(t, shardlimit.GCRA, 100, time.Second, Config{})
			srv, rs := startRefusingServer(t, clock, c.status, c.refusals)
			tr, err := NewTransport(TransportConfig{Pacer: p, Base: srv.Client().Transport, Retries: c.retries})
			if err != nil {
				t.Fatal(err)
			}
			var body io.Reader
			if c.body != nil {
				body = c.body()
			}
			req, err := http.NewRequestWithContext(context.Background(), c.method, srv.URL, body)
			if err != nil {
				t.Fatal(err)
			}
			var resp *http.Response
			done := make(chan error, 1)
			go func() {
				var err error
				resp, err = (&http.Client{Transport: tr}).Do(req)
				done <- err
			}()
			driveUntil(t, clock, done)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.wantStatus || len(rs.arrivals) != c.sends {
				t.Fatalf("status %d after %d sends, want %d after %d", resp.StatusCode, len(rs.arrivals), c.wantStatus, c.sends)
			}
			for i := 1; i < len(rs.arrivals); i++ {
				if gap := rs.arrivals[i] - rs.arrivals[i-1]; gap < 5*time.Second {
					t.Errorf("send %d came %v after the previous one, before its Retry-After (5s)", i, gap)
				}
				if rs.bodies[i] != rs.bodies[0] {
					t.Errorf("send %d carried body %q, want the first's %q", i, rs.bodies[i], rs.bodies[0])
				}
			}
			if c.body != nil && rs.bodies[0] != "payload" {
				t.Errorf("the server got body %q, want %q", rs.bodies[0], "payload")
			}
		})
	}
	p, _ := newPacer(t, shardlimit.GCRA, 100, time.Second, Config{})
	for _, r := range []int{-1, MaxRetries + 1} {
		if _, err := NewTransport(TransportConfig{Pacer: p, Retries: r}); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("NewTransport with Retries %d = %v, want ErrInvalidConfig", r, err)
		}
	}
	// A Pacer that fails fast never waits for a hold: retries it would
	// silently never make are a config error.
	ff, _ := newPacer(t, shardlimit.GCRA, 100, time.Second, Config{FailFast: true})
	if _, err := NewTransport(TransportConfig{Pacer: ff, Retries: 1}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewTransport with Retries 1 and a fail-fast Pacer = %v, want ErrInvalidConfig", err)
	}
}

// A retry whose hold would end after the request context's deadline is
// not made: the caller gets the answer.
func TestTransportNoRetryPastDeadline(t *testing.T) {
	p, clock := newPacer(t, shardlimit.GCRA, 100, time.Second, Config{})
	tr, err := NewTransport(TransportConfig{Pacer: p, Retries: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), clock.Now().Add(3*time.Second))
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, "GET", "http://api.example.com/", nil)
	resp := &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"5"}}, Body: io.NopCloser(strings.NewReader("")), Request: req}
	if !tr.hold("api.example.com", resp) {
		t.Fatal("a 429 with Retry-After 5 set no hold")
	}
	if tr.retry("api.example.com", req, resp, 0) {
		t.Fatal("retried although the hold (5s) ends after the deadline (3s)")
	}
	ctx2, cancel2 := context.WithDeadline(context.Background(), clock.Now().Add(6*time.Second))
	defer cancel2()
	if !tr.retry("api.example.com", req.WithContext(ctx2), resp, 0) {
		t.Fatal("not retried although the hold (5s) ends before the deadline (6s)")
	}
}
