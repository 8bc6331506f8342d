package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Limits and defaults of Config.
const (
	// MaxDuration is the longest run.
	MaxDuration = 10 * time.Minute
	// LateAfter is how far behind its schedule a send may leave and still
	// count as on time.
	LateAfter = 10 * time.Millisecond

	defaultHeader      = "X-Client-ID"
	defaultConcurrency = 64
	maxConcurrency     = 10000
	defaultTimeout     = 5 * time.Second
	maxTimeout         = time.Minute
	defaultMaxRequests = 1000000
	defaultIdleConn    = 2 * time.Second
)

// Config configures a run. The zero value of a field means its default.
type Config struct {
	// URL is the server, scheme://host[:port]; see resolveTarget for the
	// loopback rule. Required.
	URL string
	// AllowRemote lets URL name a host that is not loopback.
	AllowRemote bool
	// Duration is how long requests are scheduled, in (0, MaxDuration].
	// Required.
	Duration time.Duration
	// Streams are the clients, routes and rates. Required.
	Streams []Stream
	// Header carries the client identity (default X-Client-ID).
	Header string
	// Concurrency caps the requests in flight (and the connections), in
	// [1, 10000]; default 64. When every slot is busy, sends wait and go
	// out late (see Report).
	Concurrency int
	// Window is the rate-limit window to assume for routes whose responses
	// state none (X-RateLimit-Window-Ms or RateLimit-Policy w=); 0 means no
	// per-window counts for them.
	Window time.Duration
	// Timeout bounds each request, in (0, 1m]; default 5 s. It also bounds
	// how long the run waits for requests in flight once scheduling stops.
	Timeout time.Duration
	// MaxRequests caps the requests a run may schedule (the sum over
	// streams of rate x duration); default 1,000,000. A larger plan is an
	// error, not a silent cut.
	MaxRequests int
	// Progress, if set, receives one line per ProgressEvery.
	Progress io.Writer
	// ProgressEvery is the progress period; default 1 s.
	ProgressEvery time.Duration
	// IdleConnTimeout closes keep-alive connections idle this long; default
	// 2 s. fasthttp's connection cleaner goroutine outlives Run by at most
	// this much.
	IdleConnTimeout time.Duration
}

// check applies defaults and validates c.
func (c *Config) check() error {
	if c.Header == "" {
		c.Header = defaultHeader
	}
	if c.Concurrency == 0 {
		c.Concurrency = defaultConcurrency
	}
	if c.Timeout == 0 {
		c.Timeout = defaultTimeout
	}
	if c.MaxRequests == 0 {
		c.MaxRequests = defaultMaxRequests
	}
	if c.ProgressEvery <= 0 {
		c.ProgressEvery = time.Second
	}
	if c.IdleConnTimeout <= 0 {
		c.IdleConnTimeout = defaultIdleConn
	}
	switch {
	case c.Duration <= 0 || c.Duration > MaxDuration:
		return fmt.Errorf("-duration %v: must be above 0 and at most %v", c.Duration, MaxDuration)
	case c.Concurrency < 1 || c.Concurrency > maxConcurrency:
		return fmt.Errorf("-concurrency %d: must be in [1, %d]", c.Concurrency, maxConcurrency)
	case c.Timeout < 0 || c.Timeout > maxTimeout:
		return fmt.Errorf("-timeout %v: must be above 0 and at most %v", c.Timeout, maxTimeout)
	case c.Window < 0:
		return fmt.Errorf("-window %v: must not be negative", c.Window)
	case c.MaxRequests < 0:
		return fmt.Errorf("-max-requests %d: must not be negative", c.MaxRequests)
	case len(c.Streams) == 0:
		return fmt.Errorf("%w: no streams", errSpec)
	}
	if err := checkToken(c.Header); err != nil {
		return fmt.Errorf("-header: %v", err)
	}
	total := 0
	for _, s := range c.Streams {
		if !(s.Rate > 0 && s.Rate <= MaxRate) {
			return fmt.Errorf("%w: %s %s: rate %v/s not in (0, %d]", errSpec, s.Client, s.Route, s.Rate, MaxRate)
		}
		total += plannedSends(s.Rate, c.Duration)
	}
	if total > c.MaxRequests {
		return fmt.Errorf("the plan has %d requests, above -max-requests %d: lower the rates or -duration, or raise -max-requests", total, c.MaxRequests)
	}
	return nil
}

// sendAt returns when send i of a stream at rate requests per second is
// scheduled, as an offset from the start of the run. Computed from i, not
// accumulated, so the schedule does not drift.
func sendAt(rate float64, i int) time.Duration {
	return time.Duration(float64(i) * float64(time.Second) / rate)
}

// plannedSends returns how many sends of a stream at rate are scheduled
// before d: the i with sendAt(rate, i) < d.
func plannedSends(rate float64, d time.Duration) int {
	if d <= 0 {
		return 0
	}
	n := int(math.Ceil(d.Seconds() * rate))
	for n > 0 && sendAt(rate, n-1) >= d {
		n--
	}
	for sendAt(rate, n) < d {
		n++
	}
	return n
}

// span is one admitted request: when it was sent and when its answer came,
// in nanoseconds since the start of the run.
type span struct{ sent, answered int64 }

// streamState is a Stream's schedule and what happened to it. The counters
// are atomic (the progress line reads them); the rest is under mu.
type streamState struct {
	Stream
	url     string // the full request URL
	planned int    // sends scheduled within the duration

	sent, admitted, denied, other, failed, late atomic.Int64
	maxLag                                      atomic.Int64 // ns

	mu       sync.Mutex
	spans    []span  // admitted requests
	lat      []int64 // latency of every answered request, ns
	limit    int64   // last X-RateLimit-Limit (or RateLimit-Policy q=)
	window   time.Duration
	winFrom  string // the header the window came from
	strategy string // last X-RateLimit-Strategy
	statuses map[int]int64
	firstErr string
}

// gen is one run in progress.
type gen struct {
	cfg      Config
	hc       *fasthttp.HostClient
	start    time.Time // carries a monotonic reading; offsets use time.Since
	streams  []*streamState
	slots    chan struct{} // one token per request in flight
	inflight sync.WaitGroup
}

// Run sends cfg.Streams to cfg.URL for cfg.Duration and returns what
// happened. Pacing is open-loop: send i of a stream at rate R is scheduled
// at start + i/R whatever the answers are doing. A send that cannot leave
// on time (all cfg.Concurrency slots are waiting on a slow server) leaves
// as soon as a slot frees, is counted late, and later sends catch up in a
// burst; sends still waiting when the duration ends are counted missed.
// Latency is measured from the actual send, so falling behind shows in the
// late and missed counts rather than in the percentiles.
//
// When ctx is cancelled (Ctrl-C) scheduling stops, requests in flight
// finish, and the report so far is returned with Interrupted set. Run
// returns an error only for a bad config or an unreachable server; it
// waits for every goroutine it started before returning.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	tgt, err := resolveTarget(ctx, cfg.URL, cfg.AllowRemote)
	if err != nil {
		return nil, err
	}
	if err := preflight(ctx, tgt, cfg.Timeout); err != nil {
		return nil, err
	}
	// A plain net.Dialer, not fasthttp's default one, whose DNS cache
	// starts a goroutine that never ends.
	dialer := &net.Dialer{Timeout: cfg.Timeout}
	hc := &fasthttp.HostClient{
		Addr:                tgt.addr,
		Dial:                func(addr string) (net.Conn, error) { return dialer.Dial("tcp", addr) },
		Name:                "shardlimit-loadgen",
		IsTLS:               tgt.tls,
		MaxConns:            cfg.Concurrency,
		MaxConnWaitTimeout:  cfg.Timeout,
		MaxIdleConnDuration: cfg.IdleConnTimeout,
		ReadTimeout:         cfg.Timeout,
		WriteTimeout:        cfg.Timeout,
	}
	if tgt.tls {
		hc.TLSConfig = &tls.Config{ServerName: tgt.host}
	}
	defer hc.CloseIdleConnections()

	g := &gen{cfg: cfg, hc: hc, slots: make(chan struct{}, cfg.Concurrency)}
	for _, s := range cfg.Streams {
		g.streams = append(g.streams, &streamState{
			Stream:   s,
			url:      tgt.base + s.Route,
			planned:  plannedSends(s.Rate, cfg.Duration),
			statuses: make(map[int]int64),
		})
	}

	g.start = time.Now()
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	progDone := make(chan struct{})
	var prog sync.WaitGroup
	if cfg.Progress != nil {
		prog.Go(func() { g.progress(progDone) })
	}
	var pacers sync.WaitGroup
	for _, st := range g.streams {
		pacers.Go(func() { g.pace(ctx, runCtx, st) })
	}
	pacers.Wait()
	stopped := min(time.Since(g.start), cfg.Duration)
	interrupted := false
	if ctx.Err() != nil {
		for _, st := range g.streams {
			interrupted = interrupted || st.sent.Load() < int64(st.planned)
		}
	}
	g.inflight.Wait()
	close(progDone)
	prog.Wait()
	return g.report(stopped, time.Since(g.start), interrupted, tgt), nil
}

// preflight dials the server once, so that a server that is not running is
// one clear error rather than thousands of failed requests.
func preflight(ctx context.Context, t target, timeout time.Duration) error {
	d := net.Dialer{Timeout: min(timeout, 2*time.Second)}
	c, err := d.DialContext(ctx, "tcp", t.addr)
	if err != nil {
		return fmt.Errorf("cannot reach %s (%s): %v; is the server running? (go run ./cmd/shardlimit-demo)", t.base, t.addr, err)
	}
	return c.Close()
}

// pace sends st's requests on schedule until they are all sent, ctx (the
// caller's) is done, or runCtx (the duration) ends while a send waits for a
// slot. Every planned send is scheduled before the duration ends, so a pacer
// that wakes up late (the process was not scheduled) still sends: it is
// counted late, not missed; only a send still waiting for a slot when the
// duration ends is missed.
func (g *gen) pace(ctx, runCtx context.Context, st *streamState) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for i := 0; i < st.planned; i++ {
		at := sendAt(st.Rate, i)
		if wait := at - time.Since(g.start); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		}
		select {
		case g.slots <- struct{}{}: // a free slot: no wait, whatever the time
		default:
			select {
			case g.slots <- struct{}{}:
			case <-runCtx.Done():
				return
			}
			if runCtx.Err() != nil { // both were ready: the deadline wins
				<-g.slots
				return
			}
		}
		if ctx.Err() != nil {
			<-g.slots
			return
		}
		if lag := time.Since(g.start) - at; lag > LateAfter {
			st.late.Add(1)
			for old := st.maxLag.Load(); int64(lag) > old && !st.maxLag.CompareAndSwap(old, int64(lag)); old = st.maxLag.Load() {
			}
		}
		st.sent.Add(1)
		g.inflight.Go(func() {
			defer func() { <-g.slots }()
			g.send(st)
		})
	}
}

// send makes one request of st and records its outcome.
func (g *gen) send(st *streamState) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(st.url)
	if st.Client != Anonymous {
		req.Header.Set(g.cfg.Header, st.Client)
	}
	t0 := time.Since(g.start)
	err := g.hc.DoTimeout(req, resp, g.cfg.Timeout)
	t1 := time.Since(g.start)
	if err != nil {
		st.failed.Add(1)
		st.mu.Lock()
		if st.firstErr == "" {
			st.firstErr = errText(err)
		}
		st.mu.Unlock()
		return
	}
	code := resp.StatusCode()
	switch {
	case code >= 200 && code < 300:
		st.admitted.Add(1)
	case code == fasthttp.StatusTooManyRequests:
		st.denied.Add(1)
	default:
		st.other.Add(1)
	}
	f := readFields(&resp.Header)
	st.mu.Lock()
	defer st.mu.Unlock()
	st.lat = append(st.lat, int64(t1-t0))
	if code >= 200 && code < 300 {
		st.spans = append(st.spans, span{int64(t0), int64(t1)})
	} else {
		st.statuses[code]++
	}
	if f.limit > 0 {
		st.limit = f.limit
	}
	if f.window > 0 {
		st.window, st.winFrom = f.window, f.windowFrom
	}
	if f.strategy != "" {
		st.strategy = f.strategy
	}
}

// errText shortens a request error for the report.
func errText(err error) string {
	if errors.Is(err, fasthttp.ErrTimeout) {
		return "timeout"
	}
	return err.Error()
}

// progress writes a line of totals every cfg.ProgressEvery until done. A
// tick that came before done but lost the race with it still gets its
// line, so a run gets one line per period it lasted.
func (g *gen) progress(done <-chan struct{}) {
	t := time.NewTicker(g.cfg.ProgressEvery)
	defer t.Stop()
	planned := 0
	for _, st := range g.streams {
		planned += st.planned
	}
	var lastSent int64
	last := g.start
	for {
		var now time.Time
		select {
		case <-done:
			select {
			case now = <-t.C:
			default:
				return
			}
		case now = <-t.C:
		}
		var sent, ok, denied, other, failed int64
		for _, st := range g.streams {
			sent += st.sent.Load()
			ok += st.admitted.Load()
			denied += st.denied.Load()
			other += st.other.Load()
			failed += st.failed.Load()
		}
		rps := float64(sent-lastSent) / now.Sub(last).Seconds()
		lastSent, last = sent, now
		fmt.Fprintf(g.cfg.Progress, "loadgen %4.0fs  sent %d/%d  2xx %d  429 %d  other %d  errors %d  %.0f req/s\n",
			now.Sub(g.start).Seconds(), sent, planned, ok, denied, other, failed, rps)
	}
}
