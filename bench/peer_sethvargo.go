package bench

import (
	"context"

	"github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
)

// Sethvargo adapts github.com/sethvargo/go-limiter's memorystore: a
// token bucket per key in a map behind an RWMutex. It reads its own clock
// (time.now through go:linkname) and takes no explicit instant.
type Sethvargo struct {
	s limiter.Store
}

// NewSethvargo returns a memorystore of p.Limit tokens per p.Window, with
// the default sweeper (every 6 h) that never runs during a benchmark.
func NewSethvargo(p Profile) (Keyed, error) {
	s, err := memorystore.New(&memorystore.Config{
		Tokens:   uint64(p.Limit),
		Interval: p.Window,
	})
	if err != nil {
		return nil, err
	}
	return &Sethvargo{s: s}, nil
}

// Name returns "sethvargo".
func (s *Sethvargo) Name() string { return "sethvargo" }

// Allow calls Store.Take.
func (s *Sethvargo) Allow(key string) bool {
	_, _, _, ok, err := s.s.Take(context.Background(), key)
	return ok && err == nil
}

// AllowBytes is Allow for a []byte key, converted to a string.
func (s *Sethvargo) AllowBytes(key []byte) bool { return s.Allow(string(key)) }

// Close stops the store's sweeper.
func (s *Sethvargo) Close() { _ = s.s.Close(context.Background()) }
