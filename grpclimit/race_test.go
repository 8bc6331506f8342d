package grpclimit

import (
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// TestConcurrentCallsNeverOverAdmit: calls made at once from many
// goroutines, unary and streams, on one key and a frozen clock, are
// admitted exactly up to the limit, for every algorithm; the rest are
// ResourceExhausted.
func TestConcurrentCallsNeverOverAdmit(t *testing.T) {
	const limit, workers, each = 25, 8, 6
	for _, alg := range []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingLog, shardlimit.SlidingCounter, shardlimit.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			e := start(t, setup{cfg: ServerConfig{Options: httplimit.Options{Clock: manual(0),
				Rules: rules(httplimit.Rule{Name: "svc", Prefix: service, Algorithm: alg, Limit: limit, Window: time.Minute})}}})
			var mu sync.Mutex
			counts := map[codes.Code]int{}
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for i := range each {
						var c codes.Code
						if (w+i)%3 == 0 {
							st, err := e.client.FullDuplexCall(t.Context())
							if err == nil {
								err = echo(st)
								_ = st.CloseSend()
							}
							c = read(nil, err).code
						} else {
							c = e.do(t, call{}).code
						}
						mu.Lock()
						counts[c]++
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if counts[codes.OK] != limit || counts[codes.ResourceExhausted] != workers*each-limit {
				t.Errorf("codes %v, want %d OK and %d ResourceExhausted", counts, limit, workers*each-limit)
			}
		})
	}
}

// TestPerMessageFastClientsNeverOverAdmit: with PerMessage, clients that
// each open a stream and send messages as fast as they can without
// reading, beside unary calls, all on one key and a frozen clock, are
// admitted exactly the limit in all: the openings, the messages echoed
// and the unary calls admitted add up to it, for every algorithm.
func TestPerMessageFastClientsNeverOverAdmit(t *testing.T) {
	const limit, streams, msgs, unary = 40, 6, 12, 10
	for _, alg := range []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingLog, shardlimit.SlidingCounter, shardlimit.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			e := start(t, setup{cfg: ServerConfig{PerMessage: true, Options: httplimit.Options{Clock: manual(0),
				Rules: rules(httplimit.Rule{Name: "svc", Prefix: service, Algorithm: alg, Limit: limit, Window: time.Minute})}}})
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range streams {
				wg.Go(func() {
					st, err := e.client.FullDuplexCall(t.Context())
					if err != nil {
						return
					}
					for range msgs {
						if st.Send(&testpb.StreamingOutputCallRequest{}) != nil {
							break
						}
					}
					_ = st.CloseSend()
					n := int64(0)
					var rerr error
					for {
						if _, rerr = st.Recv(); rerr != nil {
							break
						}
						n++
					}
					// The opening was admitted unless it was refused with
					// its fields, retry-after among them (a refused
					// message has none).
					if h, _ := st.Header(); n > 0 || rerr == io.EOF || len(h.Get("retry-after")) == 0 {
						n++
					}
					admitted.Add(n)
				})
			}
			for range unary {
				wg.Go(func() {
					if e.do(t, call{}).code == codes.OK {
						admitted.Add(1)
					}
				})
			}
			wg.Wait()
			if n := admitted.Load(); n != limit {
				t.Errorf("admitted %d (openings, messages, unary calls), want exactly %d", n, limit)
			}
		})
	}
}

// TestReloadDuringCallsNeverOverAdmits: rules reloaded over and over while
// unary calls and streams run on one key (each reload keeps the rule and
// its limit, and adds or drops another rule) admit exactly the limit, and
// leave no Concurrency slot taken once every call is over.
func TestReloadDuringCallsNeverOverAdmits(t *testing.T) {
	const limit, workers, each = 30, 6, 10
	keep := httplimit.Rule{Name: "svc", Prefix: service, Limit: limit, Window: time.Minute,
		Concurrency: &httplimit.Concurrency{Limit: workers}}
	other := httplimit.Rule{Name: "other", Path: "/x.Y/Z", Limit: 1, Window: time.Second}
	e := start(t, setup{cfg: ServerConfig{PerMessage: true, Options: httplimit.Options{Clock: manual(0), Rules: rules(keep)}}})
	stop := make(chan struct{})
	reloaded := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				reloaded <- n
				return
			default:
			}
			rs := rules(keep)
			if n%2 == 0 {
				rs = rules(other, keep)
			}
			if err := e.lim.Reload(rs); err != nil {
				t.Error(err)
			}
			n++
		}
	}()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				if (w+i)%2 == 0 {
					if e.do(t, call{}).code == codes.OK {
						admitted.Add(1)
					}
					continue
				}
				st, err := e.client.FullDuplexCall(t.Context())
				if err != nil {
					continue
				}
				if read(nil, echo(st)).code == codes.OK {
					admitted.Add(2) // the opening and the message
				} else if h, _ := st.Header(); len(h.Get("retry-after")) == 0 {
					admitted.Add(1) // the opening alone
				}
				_ = st.CloseSend()
				_, _ = st.Recv()
			}
		})
	}
	wg.Wait()
	close(stop)
	if n := <-reloaded; n == 0 {
		t.Log("no reload ran during the calls")
	}
	if n := admitted.Load(); n != limit {
		t.Errorf("admitted %d across reloads, want exactly %d", n, limit)
	}
	waitInFlight(t, e.lim, "svc", "shared")
}

// waitInFlight waits until key has no call in flight on rule: a call's
// slot is given back after its handler returns, which its client may
// learn first.
func waitInFlight(t *testing.T, lim *Server, rule, key string) {
	t.Helper()
	for lim.InFlight(rule, key) != 0 {
		time.Sleep(time.Millisecond)
	}
}
