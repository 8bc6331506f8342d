package sync

import (
	"context"
	stdsync "sync"

	"github.com/shardlimit/shardlimit"
)

// redisTime is the now argument of the decision scripts that makes them
// decide at Redis TIME, boxed once (a boxed -1 would allocate per call).
var redisTime any = int64(-1)

// A decisionCall is one decision script call of an Exact limiter: its keys,
// its arguments and the channel of its reply, reused through decisionCalls
// once its goroutine has delivered the reply, so a decision allocates
// none of them. A call abandoned at its deadline keeps its decisionCall
// (its goroutine may still read it); the collector takes it afterwards.
type decisionCall struct {
	e     *Exact
	ctx   context.Context
	keys  [shardlimit.MaxRates]string
	args  [3 + 3*shardlimit.MaxRates]any // n, consume, now; per rate its limit and params (at most two)
	nargs int
	out   chan reply
}

var decisionCalls = stdsync.Pool{New: func() any { return &decisionCall{out: make(chan reply, 1)} }}

// newDecisionCall returns a decisionCall for a call of e bounded by ctx.
func newDecisionCall(e *Exact, ctx context.Context) *decisionCall {
	sc := decisionCalls.Get().(*decisionCall)
	sc.e, sc.ctx = e, ctx
	return sc
}

// run sends the call, registered with e.begin, and returns its reply, or
// ctx's error as soon as ctx is done (see call).
func (sc *decisionCall) run(ctx context.Context) (any, error) {
	go sc.send()
	v, err, ok := await(ctx, sc.out)
	if ok {
		sc.release() // the reply is in: send is done with sc
	}
	return v, err
}

// send runs the script and delivers its reply; it touches nothing of sc
// after the delivery.
func (sc *decisionCall) send() {
	e := sc.e
	defer e.end()
	v, err := e.script.Run(sc.ctx, e.client, sc.keys[:len(e.rates)], sc.args[:sc.nargs]...).Result()
	sc.out <- reply{v, err}
}

// release clears sc, so the pool holds no key or context, and returns it
// to the pool.
func (sc *decisionCall) release() {
	sc.e, sc.ctx, sc.keys, sc.args, sc.nargs = nil, nil, [shardlimit.MaxRates]string{}, [len(sc.args)]any{}, 0
	decisionCalls.Put(sc)
}
