package sync

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Sentinel errors of this package. Errors returned by its functions wrap one
// of them, a shardlimit sentinel, or the go-redis error that caused them.
// The errors of state changes (StateChange.Err) and stats (LastError) wrap
// one of ErrUnavailable, ErrRejected, ErrBadReply and ErrEvicting and, where
// there is one, the error that caused it: errors.Is and errors.As find both
// (for example ErrUnavailable and context.DeadlineExceeded or
// syscall.ECONNREFUSED, or ErrRejected and the redis.Error "OOM ...").
var (
	// ErrBadReply reports a reply from the store that does not have the
	// shape the script returns (wrong type, wrong length, out-of-range
	// values), or one larger than LimitReplies allows. The command may or
	// may not have been applied.
	ErrBadReply = errors.New("shardlimit/sync: bad reply from store")
	// ErrInvalidItem reports an Item that cannot be sent: TTL below one
	// millisecond, Span out of [0, MaxSpan], Floor or Seq outside
	// [0, 2^53), a Window that is not a whole number of microseconds, or a
	// Node longer than MaxNodeBytes.
	ErrInvalidItem = errors.New("shardlimit/sync: invalid item")
	// ErrUnavailable reports that the store could not be reached or did not
	// answer in time.
	ErrUnavailable = errors.New("shardlimit/sync: store unavailable")
	// ErrRejected reports that the store answered a command with an error
	// reply and did not apply it: out of memory (maxmemory with the
	// noeviction policy), an ACL denial, a key holding foreign data
	// (WRONGTYPE, or state a script finds corrupt), CROSSSLOT, READONLY,
	// and so on. The error reply (a redis.Error) is wrapped as the cause.
	ErrRejected = errors.New("shardlimit/sync: store rejected the command")
	// ErrEvicting reports that the store is evicting keys (its INFO
	// evicted_keys grew), so counters or state of this package may be
	// deleted before their time: see the package doc on eviction.
	ErrEvicting = errors.New("shardlimit/sync: store is evicting keys")
)

// storeError wraps err, a failed call to the store, in the sentinel that
// says what kind of failure it is, keeping err as the cause. An error that
// already wraps one of the sentinels is returned as it is.
func storeError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrBadReply), errors.Is(err, ErrUnavailable),
		errors.Is(err, ErrRejected), errors.Is(err, ErrEvicting):
		return err
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return fmt.Errorf("%w: %w", ErrRejected, err)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// lastError holds the most recent error of a limiter for its stats. Safe
// for concurrent use.
type lastError struct{ p atomic.Pointer[error] }

func (l *lastError) set(err error) { l.p.Store(&err) }

func (l *lastError) get() error {
	if p := l.p.Load(); p != nil {
		return *p
	}
	return nil
}
