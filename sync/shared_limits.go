package sync

import (
	"fmt"
	"time"

	"github.com/shardlimit/shardlimit"
)

// SetLimit gives key a limit of its own in this process; set it on every
// node. See shardlimit.Limiter.
func (s *Shared) SetLimit(key string, limit int) error { return s.core.SetLimit(key, limit) }

// SetLimits gives key limits of its own in this process, one per rate in
// the order of Config.Rates; set them on every node. See
// shardlimit.Limiter.
func (s *Shared) SetLimits(key string, limits ...int) error { return s.core.SetLimits(key, limits...) }

// ClearLimit makes key use the default limit again.
func (s *Shared) ClearLimit(key string) error { return s.core.ClearLimit(key) }

// SetDefaultLimits changes the limits of every key without its own, one
// per rate in the order of Config.Rates; while Degraded with fallback
// limits, they take effect on recovery. It returns an error wrapping
// shardlimit.ErrInvalidConfig if the count of limits is not the count of
// rates or a limit is out of range.
func (s *Shared) SetDefaultLimits(limits ...int) error {
	if len(limits) != len(s.defLimits) {
		return fmt.Errorf("%w: %d limits for %d rates", shardlimit.ErrInvalidConfig, len(limits), len(s.defLimits))
	}
	for _, l := range limits {
		if l < 0 || l > s.maxLimit() {
			return fmt.Errorf("%w: limit %d outside [0, %d]", shardlimit.ErrInvalidConfig, l, s.maxLimit())
		}
	}
	s.defMu.Lock()
	defer s.defMu.Unlock()
	if State(s.state.Load()) == Degraded && s.fbLimits != nil && s.policy == FallbackLocal {
		if err := s.core.SetDefaultLimits(s.fbLimits...); err != nil {
			return err
		}
	} else if err := s.core.SetDefaultLimits(limits...); err != nil {
		return err
	}
	copy(s.defLimits, limits)
	return nil
}

// SetDefaultLimit changes the limit of every key without its own: it is
// SetDefaultLimits(limit), for a limiter of one rate.
func (s *Shared) SetDefaultLimit(limit int) error { return s.SetDefaultLimits(limit) }

// Reset forgets key's local usage in this process (not in the store).
func (s *Shared) Reset(key string) error { return s.core.Reset(key) }

// Sweep evicts idle keys of the local limiter; see shardlimit.Limiter.
func (s *Shared) Sweep(now time.Time) int { return s.core.Sweep(now) }
