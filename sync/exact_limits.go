package sync

import (
	"context"
	"fmt"

	"github.com/shardlimit/shardlimit"
)

// checkKey validates a key for the configuration methods.
func (e *Exact) checkKey(key string) error {
	switch {
	case e.closed.Load():
		return shardlimit.ErrClosed
	case len(key) == 0:
		return fmt.Errorf("%w: empty key", shardlimit.ErrInvalidKey)
	case len(key) > e.cfg.MaxKeyBytes:
		return fmt.Errorf("%w: key of %d bytes is longer than %d", shardlimit.ErrInvalidKey, len(key), e.cfg.MaxKeyBytes)
	}
	return nil
}

// checkLimits validates limits, one per rate in the order of Config.Rates.
func (e *Exact) checkLimits(limits []int) (limitSet, error) {
	var ls limitSet
	if len(limits) != len(e.rates) {
		return ls, fmt.Errorf("%w: %d limits for %d rates", shardlimit.ErrInvalidConfig, len(limits), len(e.rates))
	}
	for i, limit := range limits {
		if limit < 0 || limit > shardlimit.MaxLimit {
			return ls, fmt.Errorf("%w: limit %d outside [0, %d]", shardlimit.ErrInvalidConfig, limit, shardlimit.MaxLimit)
		}
		ls[i] = limit
	}
	return ls, nil
}

// SetLimit gives key a limit of its own in [0, MaxLimit] (0 blocks the
// key). It is SetLimits(key, limit), so a limiter of several rates
// refuses it with an error wrapping ErrInvalidConfig.
func (e *Exact) SetLimit(key string, limit int) error {
	return e.SetLimits(key, limit)
}

// SetLimits gives key limits of its own, one per rate in the order of
// Config.Rates, each in [0, MaxLimit] (0 blocks the key), kept in this
// process until ClearLimit, sent with every decision and passed to the
// fallback: configure them on every process. Usage already counted in
// Redis counts against the new limits. It returns an error wrapping
// ErrInvalidConfig if the count of limits is not the count of rates or a
// limit is out of range, ErrInvalidKey for an empty or too long key,
// ErrClosed after Close, or the fallback's error.
func (e *Exact) SetLimits(key string, limits ...int) error {
	ls, err := e.checkLimits(limits)
	if err != nil {
		return err
	}
	if err := e.checkKey(key); err != nil {
		return err
	}
	e.mu.Lock()
	e.limits[key] = ls
	e.mu.Unlock()
	e.deny.invalidate(key)
	if e.fallback != nil {
		return e.fallback.SetLimits(key, limits...)
	}
	return nil
}

// ClearLimit makes key use the default limits again, here and in the
// fallback.
func (e *Exact) ClearLimit(key string) error {
	if err := e.checkKey(key); err != nil {
		return err
	}
	e.mu.Lock()
	delete(e.limits, key)
	e.mu.Unlock()
	e.deny.invalidate(key)
	if e.fallback != nil {
		return e.fallback.ClearLimit(key)
	}
	return nil
}

// SetDefaultLimit changes the limit of every key without its own. It is
// SetDefaultLimits(limit), so a limiter of several rates refuses it with
// an error wrapping ErrInvalidConfig.
func (e *Exact) SetDefaultLimit(limit int) error {
	return e.SetDefaultLimits(limit)
}

// SetDefaultLimits changes the limits of every key without its own, one
// per rate in the order of Config.Rates, each in [0, MaxLimit], here and
// in the fallback. Errors as SetLimits.
func (e *Exact) SetDefaultLimits(limits ...int) error {
	ls, err := e.checkLimits(limits)
	if err != nil {
		return err
	}
	if e.closed.Load() {
		return shardlimit.ErrClosed
	}
	e.defaults.Store(newDefaultLimits(ls))
	e.deny.invalidateAll()
	if e.fallback != nil {
		return e.fallback.SetDefaultLimits(limits...)
	}
	return nil
}

// Reset forgets key's usage, in Redis (for every process), in the
// fallback and in the journal; not its own limit. In Redis it leaves a
// marker in each rate's state key (a hash field e, kept for two of the
// longest window plus a second): every process that reads it forgets the
// units of key its journal held, instead of taking the Reset for a loss
// of them and sending them back (see the package doc on outages). It
// returns an error wrapping ErrUnavailable if Redis could not be reached
// within the Timeout, or ErrRejected if it refused the script (an ACL).
func (e *Exact) Reset(key string) error {
	if err := e.checkKey(key); err != nil {
		return err
	}
	e.journal.forget(key)
	e.births.forget(key)
	e.deny.invalidate(key)
	defer e.deny.invalidate(key) // calls sent before the reset ran cache nothing
	if e.fallback != nil {
		if err := e.fallback.Reset(key); err != nil {
			return err
		}
	}
	if !e.begin() {
		return shardlimit.ErrClosed
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	keys := e.StateKeys(key)
	px := 2*e.rates[e.longest].window.Milliseconds() + 1000
	if _, err := call(ctx, func() (any, error) {
		return resetScript.Run(ctx, e.client, keys, px).Result()
	}, e.end); err != nil {
		return fmt.Errorf("reset %q: %w", key, storeError(err))
	}
	return nil
}

// Config returns the limiter configuration in effect, defaults filled in
// and the default limits as they are now.
func (e *Exact) Config() shardlimit.Config {
	cfg := e.cfg
	d := &e.defaults.Load().lims
	if len(cfg.Rates) == 0 {
		cfg.Limit = d[0]
		return cfg
	}
	cfg.Rates = make([]shardlimit.Rate, len(e.rates))
	for i, r := range e.rates {
		cfg.Rates[i] = shardlimit.Rate{Limit: d[i], Window: r.window}
	}
	return cfg
}
