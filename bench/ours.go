package bench

import (
	"time"

	"github.com/shardlimit/shardlimit"
)

// Ours adapts a shardlimit limiter. Allow and AllowBytes read the limiter's
// clock (the default, shardlimit.DefaultClock(): the system's monotonic
// clock, read at each call); AllowAt and AllowBytesAt pass now to the
// limiter's AllowAt and AllowBytesAt, or, for an adapter built by
// OurResultFactories, to AllowN and AllowBytesN (which build a Result).
type Ours struct {
	l      shardlimit.Limiter
	name   string
	step   time.Duration
	result bool // AllowAt calls AllowN
}

// ourAlgorithms are shardlimit's algorithms in report order.
var ourAlgorithms = []shardlimit.Algorithm{
	shardlimit.FixedWindow,
	shardlimit.SlidingLog,
	shardlimit.SlidingCounter,
	shardlimit.GCRA,
}

// OurFactories returns one Factory per shardlimit algorithm, named
// "shardlimit_" plus the algorithm's name.
func OurFactories() []Factory {
	fs := make([]Factory, 0, len(ourAlgorithms))
	for _, alg := range ourAlgorithms {
		fs = append(fs, Factory{
			Name: "shardlimit_" + alg.String(),
			Ours: true,
			New:  func(p Profile) (Keyed, error) { return NewOurs(alg, p) },
		})
	}
	return fs
}

// OurResultFactories returns one Factory per shardlimit algorithm whose
// AllowAt and AllowBytesAt call AllowN and AllowBytesN and read the
// Result's Allowed, named "shardlimit_" plus the algorithm's name plus
// "_result": the cost of the Result beside AllowAt's.
func OurResultFactories() []Factory {
	fs := make([]Factory, 0, len(ourAlgorithms))
	for _, alg := range ourAlgorithms {
		fs = append(fs, Factory{
			Name: "shardlimit_" + alg.String() + "_result",
			Ours: true,
			New: func(p Profile) (Keyed, error) {
				o, err := NewOurs(alg, p)
				if err == nil {
					o.name += "_result"
					o.result = true
				}
				return o, err
			},
		})
	}
	return fs
}

// NewOurs returns shardlimit's limiter for alg configured to p, with the
// janitor disabled (the peers' sweepers run at most every few minutes, no
// benchmark lasts that long, and a sweep would evict the keys of an idle
// bucket mid-benchmark). The sliding log replaces the Allowed profile by
// AllowedLog.
func NewOurs(alg shardlimit.Algorithm, p Profile) (*Ours, error) {
	if alg == shardlimit.SlidingLog && p == Allowed {
		p = AllowedLog
	}
	return NewOursConfig(shardlimit.Config{
		Algorithm:       alg,
		Limit:           p.Limit,
		Window:          p.Window,
		JanitorInterval: -1,
	})
}

// NewOursConfig returns an adapter of a shardlimit limiter built from cfg,
// named "shardlimit_" plus the algorithm's name.
func NewOursConfig(cfg shardlimit.Config) (*Ours, error) {
	l, err := shardlimit.New(cfg)
	if err != nil {
		return nil, err
	}
	o := &Ours{l: l, name: "shardlimit_" + cfg.Algorithm.String()}
	if cfg.Algorithm == shardlimit.SlidingLog && cfg.Limit > 1 {
		// Twice the pace that would just fill the ring in a window.
		o.step = 2 * (cfg.Window + time.Duration(cfg.Limit) - 1) / time.Duration(cfg.Limit)
	}
	return o, nil
}

// Limiter returns the wrapped limiter.
func (o *Ours) Limiter() shardlimit.Limiter { return o.l }

// Name returns "shardlimit_" plus the algorithm's name.
func (o *Ours) Name() string { return o.name }

// Allow calls Limiter.Allow.
func (o *Ours) Allow(key string) bool { return o.l.Allow(key) }

// AllowBytes calls Limiter.AllowBytes.
func (o *Ours) AllowBytes(key []byte) bool { return o.l.AllowBytes(key) }

// AllowAt calls Limiter.AllowAt, or AllowN with a cost of 1.
func (o *Ours) AllowAt(key string, now time.Time) bool {
	if o.result {
		return o.l.AllowN(key, now, 1).Allowed
	}
	return o.l.AllowAt(key, now)
}

// AllowBytesAt calls Limiter.AllowBytesAt, or AllowBytesN with a cost of 1.
func (o *Ours) AllowBytesAt(key []byte, now time.Time) bool {
	if o.result {
		return o.l.AllowBytesN(key, now, 1).Allowed
	}
	return o.l.AllowBytesAt(key, now)
}

// Step is, for the sliding log, twice the interval at which requests just
// fill its ring in a window; 0 for the other algorithms.
func (o *Ours) Step() time.Duration { return o.step }

// Close calls Limiter.Close.
func (o *Ours) Close() { _ = o.l.Close() }
