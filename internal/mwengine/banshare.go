package mwengine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardlimit/shardlimit/httplimit"
)

// maxBanQueue is the most bans and lifts waiting to be written to the
// BanStore; more are dropped and counted (PolicyStats.StoreDropped).
const maxBanQueue = 4096

// banStoreTimeout bounds each exchange with the BanStore.
const banStoreTimeout = time.Second

// banOp is a ban (until > 0, Unix ns) or a lift (until 0) of a ban table
// key, to write to the BanStore.
type banOp struct {
	key   string
	until int64
}

// banShare shares an engine's bans through a BanStore: one goroutine
// writes the bans and lifts queued by requests and the API as soon as
// they are queued, and reads the bans in force every interval.
type banShare struct {
	pol      *policies
	clock    func() int64
	store    httplimit.BanStore
	interval time.Duration
	max      int // the most bans read: the ban table's size

	// mu guards queue and lifting, and orders the local side of lifts
	// (liftAndQueue) against the bans a read applies (apply): a lift is
	// made and queued in one step, and a read applies no ban of a key
	// whose lift is queued or being written, so a read that ran before a
	// lift was written cannot restore the ban. Taken before a ban table
	// stripe's lock.
	mu      sync.Mutex
	queue   []banOp
	lifting map[string]int // lifts queued or being written, by key
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}

	known map[string]int64 // bans in the store at the last complete read (and written since): key -> until; the goroutine's

	beforeApply atomic.Pointer[func(key string)] // tests: called by a read before it applies the ban of key

	errs, dropped, writes, reads atomic.Uint64
}

// startShare starts sharing e's bans through store.
func (e *Engine) startShare(store httplimit.BanStore, interval time.Duration, maxKeys int) {
	s := &banShare{
		pol: &e.pol, clock: func() int64 { return e.clock.Now().UnixNano() },
		store: store, interval: interval, max: maxKeys,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		known: map[string]int64{}, lifting: map[string]int{},
	}
	e.pol.share = s
	go s.run()
}

// put queues a ban of key until until.
func (s *banShare) put(key string, until int64) { s.enqueue(banOp{key: key, until: until}) }

// liftAndQueue lifts the ban of key in the table at now, as
// policies.liftBan with no bound, and queues the lift for the store, both
// under s.mu (see banShare.mu); it reports whether a ban was in force.
func (s *banShare) liftAndQueue(key string, now int64) bool {
	s.mu.Lock()
	was := s.pol.liftBan([]byte(key), now, 1<<63-1)
	s.queueLocked(banOp{key: key})
	s.mu.Unlock()
	s.signal()
	return was
}

// enqueue queues op and wakes the goroutine; it never blocks on the store.
func (s *banShare) enqueue(op banOp) {
	s.mu.Lock()
	s.queueLocked(op)
	s.mu.Unlock()
	s.signal()
}

// queueLocked queues op, counting a lift in lifting, or drops it if the
// queue is full. Requires s.mu held.
func (s *banShare) queueLocked(op banOp) {
	if len(s.queue) >= maxBanQueue {
		s.dropped.Add(1)
		return
	}
	s.queue = append(s.queue, op)
	if op.until == 0 {
		s.lifting[op.key]++
	}
}

// signal wakes the goroutine, if it is not awake already.
func (s *banShare) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// lifted counts a lift of key written: no longer pending.
func (s *banShare) lifted(key string) {
	s.mu.Lock()
	s.liftDoneLocked(key)
	s.mu.Unlock()
}

// liftDoneLocked takes a lift of key, written or dropped, off lifting.
// Requires s.mu held.
func (s *banShare) liftDoneLocked(key string) {
	if s.lifting[key]--; s.lifting[key] <= 0 {
		delete(s.lifting, key)
	}
}

// close writes what is queued, within banStoreTimeout, and stops the
// goroutine. Idempotent only through Engine.Close.
func (s *banShare) close() {
	close(s.stop)
	<-s.done
}

// run is the goroutine: a read at once (a node that restarts enforces the
// bans in force before its first interval ends), then writes whenever
// woken and a write and a read every interval.
func (s *banShare) run() {
	defer close(s.done)
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	s.pull()
	for {
		select {
		case <-s.stop:
			s.push()
			return
		case <-s.wake:
			s.push()
		case <-tick.C:
			s.push()
			s.pull()
		}
	}
}

// push writes the queued bans and lifts; a failed one is queued again for
// the next interval (unless the queue is full).
func (s *banShare) push() {
	s.mu.Lock()
	ops := s.queue
	s.queue = nil
	s.mu.Unlock()
	if len(ops) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), banStoreTimeout)
	defer cancel()
	var failed []banOp
	for _, op := range ops {
		ns, key := op.key[:httplimit.KeyNamespaceLen], op.key[httplimit.KeyNamespaceLen:]
		var err error
		if op.until > 0 {
			err = s.store.PutBan(ctx, httplimit.StoredBan{Namespace: ns, Key: key, Until: time.Unix(0, op.until)}, time.Unix(0, s.clock()))
		} else {
			err = s.store.LiftBan(ctx, ns, key)
		}
		if err != nil {
			s.errs.Add(1)
			failed = append(failed, op)
			continue
		}
		s.writes.Add(1)
		if op.until > 0 {
			s.known[op.key] = max(s.known[op.key], op.until)
		} else {
			delete(s.known, op.key)
			s.lifted(op.key)
		}
	}
	for _, op := range failed {
		s.requeue(op)
	}
}

// requeue queues op again (a failed write) without waking the goroutine;
// a lift is still counted in lifting, until the queue is full and drops
// it.
func (s *banShare) requeue(op banOp) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) >= maxBanQueue {
		s.dropped.Add(1)
		if op.until == 0 {
			s.liftDoneLocked(op.key)
		}
		return
	}
	s.queue = append(s.queue, op)
}

// apply sets the ban of key until until, read from the store at now,
// unless a lift of key is queued or being written: the store may still
// hold the ban that lift ends (see banShare.mu).
func (s *banShare) apply(key string, until, now int64) {
	if f := s.beforeApply.Load(); f != nil {
		(*f)(key)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lifting[key] == 0 {
		s.pol.setBan([]byte(key), until, now) // a full table counts it in BanTableFull
	}
}

// pull reads the bans in force and enforces them; after a complete read,
// a ban read before that is no longer in the store was lifted by another
// node, and is lifted here unless a later one replaced it.
func (s *banShare) pull() {
	ctx, cancel := context.WithTimeout(context.Background(), banStoreTimeout)
	defer cancel()
	now := s.clock()
	bans, complete, err := s.store.ActiveBans(ctx, time.Unix(0, now), s.max)
	if err != nil {
		s.errs.Add(1)
		return
	}
	seen := make(map[string]int64, len(bans))
	for _, b := range bans {
		if len(b.Namespace) != httplimit.KeyNamespaceLen || b.Key == "" {
			continue
		}
		key := b.Namespace + b.Key
		until := b.Until.UnixNano()
		seen[key] = until
		s.apply(key, until, now)
	}
	if complete {
		for key, until := range s.known {
			if _, ok := seen[key]; !ok && until > now {
				s.pol.liftBan([]byte(key), now, until)
			}
		}
		s.known = seen
	}
	s.reads.Add(1)
}
