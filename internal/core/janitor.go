package core

import (
	"container/heap"
	"sync"
	"sync/atomic"
	"time"
)

// janitorSweep sweeps the table at the limiter's clock, stopping early if
// stop is closed: the janitor's work for l, which the sweeper calls every
// JanitorInterval.
func (l *limiter[E]) janitorSweep(stop <-chan struct{}) {
	if t := l.now(); t >= 0 {
		l.tab.sweep(t, stop)
	}
}

// holdsKeys reports whether any shard of the table holds a key, reading
// each shard's count without its lock.
func (t *table[E]) holdsKeys() bool {
	for i := range t.shards {
		if t.shards[i].keys.Load() != 0 {
			return true
		}
	}
	return false
}

// The janitor: one goroutine per process, the sweeper, sweeps every open
// limiter whose JanitorInterval is positive, each at its own interval and
// at its own clock, one limiter and one shard at a time. It starts with the
// first limiter registered and ends when the last one closes, so the
// goroutines of a process do not grow with its limiters.
//
// Only limiters that hold keys are in its schedule (armed): a limiter
// joins it with its first key (insert arms it, one atomic load per new
// key) and leaves it after a sweep that finds it holding none, so idle
// limiters cost nothing per tick however many there are.

// sweeper is the process's janitor. Its goroutine starts with the first
// job added, never at init.
var sweeper = newSweepSchedule()

// janitorJob is one limiter's place in the sweeper's schedule. Its fields
// but sweep, holds, interval, stop and armed are guarded by sweeper.mu.
type janitorJob struct {
	sweep    func(stop <-chan struct{}) // sweeps the limiter's table
	holds    func() bool                // reports whether the table holds keys
	interval time.Duration
	stop     chan struct{} // closed by remove: a sweep in progress ends early

	// armed is set while the job is in the schedule or about to be: the
	// table's insert arms the job when it finds armed false, and the
	// sweeper clears it when it takes an empty limiter out (see idle).
	armed atomic.Bool

	due      time.Duration // on the sweeper's monotonic clock (since epoch)
	index    int           // in the heap; -1 while out of it
	sweeping bool          // the sweeper is running sweep
	removed  bool
	sweeps   uint64 // sweeps begun, for tests
}

// jobHeap is a min-heap of jobs by due time, for container/heap.
type jobHeap []*janitorJob

func (h jobHeap) Len() int           { return len(h) }
func (h jobHeap) Less(i, j int) bool { return h[i].due < h[j].due }
func (h jobHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *jobHeap) Push(x any) {
	j := x.(*janitorJob)
	j.index = len(*h)
	*h = append(*h, j)
}
func (h *jobHeap) Pop() any {
	old := *h
	j := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	j.index = -1
	return j
}

// sweepSchedule runs the jobs of the open limiters in the order they fall
// due: a min-heap by due time, O(log n) per sweep, registration and
// removal.
type sweepSchedule struct {
	mu    sync.Mutex
	cond  sync.Cond // signalled on mu when a sweep ends
	jobs  jobHeap
	count int       // jobs registered, armed or not
	run   *sweepRun // the running goroutine; nil when none
	epoch time.Time // carries a monotonic reading
}

func newSweepSchedule() *sweepSchedule {
	sc := &sweepSchedule{epoch: time.Now()}
	sc.cond.L = &sc.mu
	return sc
}

// sweepRun is one life of the sweeper's goroutine, from the first limiter
// added to the last one removed.
type sweepRun struct {
	wake chan struct{} // buffered: a job was added at the heap's top
	quit chan struct{} // closed when the last job is removed
	done chan struct{} // closed when the goroutine returns

	current *janitorJob // the job being swept, out of the heap; under mu
}

// newJanitorJob returns the job that runs sweep every interval while
// holds reports keys.
func newJanitorJob(interval time.Duration, sweep func(stop <-chan struct{}), holds func() bool) *janitorJob {
	return &janitorJob{sweep: sweep, holds: holds, interval: interval, stop: make(chan struct{}), index: -1}
}

// arm puts j in the sweeper's schedule, its next sweep an interval from
// now, if it is out of it: the table calls it when it stores a key and
// finds j unarmed. Safe for concurrent use; called under a shard lock
// (the sweeper never takes one while it holds its own).
func (j *janitorJob) arm() {
	if j.armed.Load() || !j.armed.CompareAndSwap(false, true) {
		return
	}
	sweeper.schedule(j)
}

// idle takes j out of the schedule if its limiter holds no key: it clears
// armed, then looks at the table, so that an insert either sees armed
// clear (and arms j again) or is seen here. It reports whether j stays
// out. Requires sweeper.mu held and j out of the heap.
func (j *janitorJob) idle() bool {
	j.armed.Store(false)
	if !j.holds() {
		return true
	}
	j.armed.Store(true) // an insert that armed j meanwhile finds it in the heap
	return false
}

// now returns the time since the schedule's epoch, by the monotonic clock.
func (sc *sweepSchedule) now() time.Duration {
	return time.Since(sc.epoch)
}

// add registers j, unarmed (its first key arms it), starting the
// sweeper's goroutine if none runs.
func (sc *sweepSchedule) add(j *janitorJob) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.count++
	if sc.run == nil {
		sc.run = &sweepRun{wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
		go sc.loop(sc.run)
	}
}

// schedule puts j in the heap, due an interval from now, unless it is
// there already, being swept (the sweeper puts it back) or removed.
func (sc *sweepSchedule) schedule(j *janitorJob) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if j.removed || j.index >= 0 || j.sweeping || sc.run == nil {
		return
	}
	j.due = sc.now() + j.interval
	heap.Push(&sc.jobs, j)
	if j.index == 0 {
		select {
		case sc.run.wake <- struct{}{}:
		default:
		}
	}
}

// remove takes j out of the schedule for good and returns once no sweep of
// j runs: a sweep in progress is told to stop (it ends within one chunk of
// one shard) and waited for; a sweep of another limiter is not. Removing
// the last job stops the sweeper's goroutine and waits for it to return.
func (sc *sweepSchedule) remove(j *janitorJob) {
	sc.mu.Lock()
	j.removed = true
	close(j.stop)
	if j.index >= 0 {
		heap.Remove(&sc.jobs, j.index)
	}
	for j.sweeping {
		sc.cond.Wait()
	}
	sc.count--
	var r *sweepRun
	if sc.count == 0 && !sc.busy() && sc.run != nil {
		r, sc.run = sc.run, nil
		close(r.quit)
	}
	sc.mu.Unlock()
	if r != nil {
		<-r.done
	}
}

// busy reports whether the sweeper is sweeping a job not yet removed (one
// out of the heap while it runs). Requires sc.mu held.
func (sc *sweepSchedule) busy() bool {
	return sc.run != nil && sc.run.current != nil && !sc.run.current.removed
}

// sweepSlack is how early a sweep may run: jobs due within it of the
// first are swept in one wake-up, so many limiters whose sweeps fall due
// at different instants do not wake the sweeper once each. A sweep judges
// keys idle at the instant it runs, so an early one is as right as a late
// one.
const sweepSlack = 10 * time.Millisecond

// loop is the sweeper's goroutine: it sweeps each job when it falls due,
// and sleeps until the next one does, until r.quit is closed.
func (sc *sweepSchedule) loop(r *sweepRun) {
	defer close(r.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		sc.mu.Lock()
		if sc.run != r {
			sc.mu.Unlock()
			return
		}
		now := sc.now()
		if len(sc.jobs) > 0 && sc.jobs[0].due <= now+sweepSlack {
			j := heap.Pop(&sc.jobs).(*janitorJob)
			j.sweeping, j.sweeps = true, j.sweeps+1
			r.current = j
			sc.mu.Unlock()

			j.sweep(j.stop)

			sc.mu.Lock()
			j.sweeping = false
			r.current = nil
			if !j.removed && !j.idle() {
				// As a ticker does: the next sweep an interval after this
				// one was due, or at once if that passed during the sweep.
				j.due = max(j.due+j.interval, sc.now())
				heap.Push(&sc.jobs, j)
			}
			sc.cond.Broadcast()
			sc.mu.Unlock()
			continue
		}
		wait := time.Hour
		if len(sc.jobs) > 0 {
			wait = sc.jobs[0].due - now
		}
		sc.mu.Unlock()
		timer.Reset(wait)
		select {
		case <-r.quit:
			return
		case <-r.wake:
		case <-timer.C:
		}
	}
}
