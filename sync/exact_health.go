package sync

import (
	"context"
	"errors"
	"net"
	"time"
)

// degradeCount is how many calls in a row must fail for Exact to become
// Degraded (and DegradeAfter pass): one slow or lost call is not an outage.
const degradeCount = 3

// failed counts a call started at start that failed with err, and
// degrades the limiter when transport errors have lasted (see DegradeAfter).
func (e *Exact) failed(err error, start time.Time) {
	e.errs.Add(1)
	if isTimeout(err) {
		e.timeouts.Add(1)
	}
	if errors.Is(err, ErrBadReply) {
		e.badReplies.Add(1)
	}
	transport := transportError(err)
	err = storeError(err)
	e.lastErr.set(err)
	if !transport {
		e.endRun() // Redis answered: it is reachable
		return
	}
	if !e.sustained(start) {
		return
	}
	if r, ok := e.client.(topologyReloader); ok {
		r.ReloadState(context.Background()) // a failed-over Cluster master
	}
	if e.state.CompareAndSwap(int32(Healthy), int32(Degraded)) {
		e.trips.Add(1)
		select {
		case e.trip <- err:
		default:
		}
	}
}

// sustained adds a call started at start to the run of failed calls and
// reports whether the run is long enough to degrade the limiter.
func (e *Exact) sustained(start time.Time) bool {
	e.runMu.Lock()
	defer e.runMu.Unlock()
	if e.runCalls == 0 || start.Before(e.runStart) {
		e.runStart = start
	}
	e.runCalls++
	e.failing.Store(true)
	return e.runCalls >= degradeCount && time.Since(e.runStart) >= e.degrade
}

// endRun ends the run of failed calls: a call reached Redis.
func (e *Exact) endRun() {
	e.runMu.Lock()
	e.runCalls = 0
	e.failing.Store(false)
	e.runMu.Unlock()
}

// isTimeout reports whether err is a timeout.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// run is the background goroutine: it reports state changes and probes
// Redis while degraded, until Close.
func (e *Exact) run() {
	defer close(e.done)
	// Eviction checks while Healthy; the first at once (the policy).
	timer := time.NewTimer(0)
	defer timer.Stop()
	check := timer.C
	if !e.watch.on() {
		check = nil
	}
	for {
		select {
		case <-e.stop:
			return
		case err := <-e.trip:
			e.notify(StateChange{From: Healthy, To: Degraded, Err: err, At: time.Now()})
		case <-check:
			err := e.checkEviction()
			if !e.watch.on() { // Redis refused INFO: never asked again
				check = nil
			}
			timer.Reset(e.watch.wait(time.Now()))
			if err == nil || !e.state.CompareAndSwap(int32(Healthy), int32(Degraded)) {
				continue
			}
			e.trips.Add(1)
			e.notify(StateChange{From: Healthy, To: Degraded, Err: err, At: time.Now()})
		}
		if !e.probe() {
			return
		}
		e.notify(StateChange{From: Degraded, To: Healthy, At: time.Now()})
		timer.Reset(e.watch.wait(time.Now()))
	}
}

// checkEviction reads Redis's eviction state and returns an error wrapping
// ErrEvicting if it evicted keys since the previous check.
func (e *Exact) checkEviction() error {
	if !e.begin() {
		return nil
	}
	ctx, cancel := context.WithTimeout(e.loopCtx, e.timeout)
	defer cancel()
	return e.watch.check(ctx, func(ctx context.Context) (evictionInfo, error) {
		v, err := call(ctx, func() (any, error) {
			in, err := readEviction(ctx, e.client)
			return in, err
		}, e.end)
		in, ok := v.(evictionInfo)
		if err != nil || !ok {
			return evictionInfo{}, err
		}
		return in, nil
	})
}

// probe pings Redis with exponential back-off until it answers and, if
// the limiter is degraded by eviction, a check finds that Redis evicted no
// key since the previous one (true), or until the limiter is closed
// (false).
func (e *Exact) probe() bool {
	d := e.probeMin
	for {
		e.backoff.Store(int64(d))
		if !e.sleep(d) || !e.begin() {
			return false
		}
		e.probes.Add(1)
		ctx, cancel := context.WithTimeout(e.loopCtx, e.timeout)
		_, err := call(ctx, func() (any, error) { return e.client.Ping(ctx).Result() }, e.end)
		cancel()
		if err != nil {
			e.probeFails.Add(1)
			e.lastErr.set(storeError(err))
			d = min(2*d, e.probeMax)
			continue
		}
		if e.watch.evicting() {
			// Still evicting until a check a full interval after the
			// last one finds no eviction.
			if !e.sleep(e.watch.wait(time.Now())) {
				return false
			}
			if e.checkEviction() != nil {
				d = e.probeMin
				continue
			}
		}
		e.backoff.Store(int64(e.probeMin))
		e.endRun()
		e.state.Store(int32(Healthy))
		e.recoveries.Add(1)
		return true
	}
}

// sleep waits d and returns true, or false as soon as the limiter is
// closed.
func (e *Exact) sleep(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-e.stop:
		return false
	case <-t.C:
		return true
	}
}

func (e *Exact) notify(c StateChange) {
	if e.onChange != nil {
		e.onChange(c)
	}
}

// State returns the current state.
func (e *Exact) State() State {
	return State(e.state.Load())
}
