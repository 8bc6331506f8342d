package bench

import (
	"context"

	"github.com/ulule/limiter/v3"
	"github.com/ulule/limiter/v3/drivers/store/memory"
)

// Ulule adapts github.com/ulule/limiter/v3 with its memory store: a fixed
// window counter per key in a sync.Map, keys stored with the store's prefix.
// It reads time.Now itself and takes no explicit instant.
type Ulule struct {
	l *limiter.Limiter
}

// NewUlule returns a limiter of p.Limit requests per p.Window on a memory
// store with the library's defaults (prefix "limiter", expired entries
// cleaned every 30 s).
func NewUlule(p Profile) (Keyed, error) {
	return &Ulule{l: limiter.New(memory.NewStore(), limiter.Rate{
		Period: p.Window,
		Limit:  int64(p.Limit),
	})}, nil
}

// Name returns "ulule".
func (u *Ulule) Name() string { return "ulule" }

// Allow calls Limiter.Get, which counts the request, and reports whether
// the limit was not reached.
func (u *Ulule) Allow(key string) bool {
	c, err := u.l.Get(context.Background(), key)
	return err == nil && !c.Reached
}

// AllowBytes is Allow for a []byte key, converted to a string.
func (u *Ulule) AllowBytes(key []byte) bool { return u.Allow(string(key)) }

// Close does nothing: the memory store stops its cleaner when it is
// garbage collected.
func (u *Ulule) Close() {}
