package sync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit"
)

// maxCharge bounds the units of one charge, either sign: the charge
// scripts' range.
const maxCharge = 1 << 30

// replayBatch is the most charges a replay sends in one pipeline.
const replayBatch = 256

// charge adds n units to every rate of key at the instant at, whatever the
// limits: an overdraft the store never refuses (a rate's count may pass
// its limit; the decisions after it deny until it has drained). A negative
// n is a refund: it takes -n units off every rate, never below zero (GCRA:
// the theoretical arrival time moves back by -n*W/l, never behind the later
// of now and at). Units of an instant whose window, or bucket, no longer
// counts change nothing. n is in [-2^30, 2^30]; 0 sends nothing.
//
// It is one call of the algorithm's charge script (see scripts_charge.go)
// for all rates, bounded by the Timeout and by ctx. It returns an error
// wrapping shardlimit.ErrInvalidCost for n out of range,
// shardlimit.ErrInvalidKey for a bad key, shardlimit.ErrClosed after
// Close, or the store's failure wrapping ErrUnavailable, ErrRejected or
// ErrBadReply (then whether the units were applied is unknown if the call
// timed out). Safe for concurrent use.
func (e *Exact) charge(ctx context.Context, key string, at time.Time, n int) error {
	return e.chargeAt(ctx, key, max(0, at.UnixMicro()), n)
}

// chargeAt is charge at the instant at (Unix µs), or at the store's now
// (the instant its scripts decide at) if at is -1.
func (e *Exact) chargeAt(ctx context.Context, key string, at int64, n int) error {
	switch {
	case n < -maxCharge || n > maxCharge:
		return fmt.Errorf("%w: charge of %d units outside [-2^30, 2^30]", shardlimit.ErrInvalidCost, n)
	case len(key) == 0 || len(key) > e.cfg.MaxKeyBytes:
		return shardlimit.ErrInvalidKey
	case n == 0:
		return nil
	}
	if !e.begin() {
		return shardlimit.ErrClosed
	}
	if n < 0 {
		e.journal.refunded(key, -n) // before it can reach the store (see journalView)
		e.deny.invalidate(key)      // and the denials of calls that cross it (see denyCache)
		defer e.deny.invalidate(key)
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	keys, args := e.chargeArgs(key, at, int64(n), e.replayNow())
	v, err := call(ctx, func() (any, error) {
		return e.charger.Run(ctx, e.client, keys, args...).Result()
	}, e.end)
	if err == nil {
		if _, ok := v.(int64); !ok {
			err = fmt.Errorf("%w: charge reply %T, want an integer", ErrBadReply, v)
		}
	}
	if err != nil {
		return fmt.Errorf("charge %q: %w", key, storeError(err))
	}
	return nil
}

// chargeArgs returns the keys and arguments of a charge of n units of key
// at at (Unix µs; -1: the script's now), decided at now (Unix µs; -1:
// Redis TIME).
func (e *Exact) chargeArgs(key string, at, n, now int64) ([]string, []any) {
	lims := e.limitsFor(key)
	args := make([]any, 3, 3+3*len(e.rates))
	args[0], args[1], args[2] = n, max(-1, at), now
	for i, r := range e.rates {
		args = append(args, lims[i])
		args = append(args, r.params...)
	}
	return e.StateKeys(key), args
}

// replayNow returns the instant the charge scripts decide at: Redis TIME
// (-1), or with callerTime the latest instant a decision was given.
func (e *Exact) replayNow() int64 {
	if e.callerTime {
		return e.latest.Load()
	}
	return -1
}

// journalNow returns the instant (Unix µs) by which the journal drops what
// no longer counts.
func (e *Exact) journalNow() int64 {
	if e.callerTime {
		return e.latest.Load()
	}
	return time.Now().UnixMicro()
}

// replay sends the journal's pending units, or all its units if all (the
// store may have lost state), with the charge script in pipelines. Units
// the store may have missed stay pending for the next replay if it fails.
// Only the hub's goroutine calls it.
func (e *Exact) replay(ctx context.Context, all bool) error {
	items := e.journal.take(e.replayBuf[:0], e.journalNow(), all)
	err := e.sendCharges(ctx, items)
	e.journal.settle(err == nil)
	clear(items)
	e.replayBuf = items[:0]
	if err == nil {
		e.replayed.Add(uint64(len(items)))
	}
	return err
}

// sendCharges sends items: the script loaded once (a store that restarted
// has lost it), then pipelines of at most replayBatch EVALSHA, each bounded
// by the Timeout.
func (e *Exact) sendCharges(ctx context.Context, items []charge) error {
	if len(items) == 0 {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, e.timeout)
	_, err := call(lctx, func() (any, error) { return e.charger.Load(lctx, e.client).Result() }, nil)
	cancel()
	if err != nil {
		return fmt.Errorf("load the charge script: %w", storeError(err))
	}
	now := e.replayNow()
	for len(items) > 0 {
		b := items[:min(len(items), replayBatch)]
		items = items[len(b):]
		if err := e.sendBatch(ctx, b, now); err != nil {
			return err
		}
	}
	return nil
}

// sendBatch sends the charges of b in one pipeline. A charge the store
// refuses (a key holding foreign or corrupt state, which every decision of
// the key also fails on) is counted in ExactStats.ReplayRejected and
// dropped; any other failure fails the batch.
func (e *Exact) sendBatch(ctx context.Context, b []charge, now int64) error {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	_, err := call(ctx, func() (any, error) {
		pipe := e.client.Pipeline()
		cmds := make([]*redis.Cmd, len(b))
		for i, c := range b {
			keys, args := e.chargeArgs(c.key, c.at, min(c.n, maxCharge), now)
			cmds[i] = e.charger.EvalSha(ctx, pipe, keys, args...)
		}
		_, _ = pipe.Exec(ctx) // the first error; each command's is read below
		for _, c := range cmds {
			err := c.Err()
			var rerr redis.Error
			switch {
			case err == nil:
				if _, ok := c.Val().(int64); !ok {
					return nil, fmt.Errorf("%w: charge reply %T, want an integer", ErrBadReply, c.Val())
				}
			case errors.As(err, &rerr) && !strings.HasPrefix(err.Error(), "NOSCRIPT"):
				e.replayRejected.Add(1)
				e.lastErr.set(storeError(err))
			default:
				return nil, err
			}
		}
		return nil, nil
	}, nil)
	if err != nil {
		return fmt.Errorf("replay: %w", storeError(err))
	}
	return nil
}
