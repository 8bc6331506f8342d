package sync

import "context"

// reply is the outcome of one Redis call run by call.
type reply struct {
	v   any
	err error
}

// call runs f in a goroutine of its own and returns its outcome, or ctx's
// error as soon as ctx is done, whichever comes first. go-redis bounds its
// socket reads and writes by ctx only when the client has
// ContextTimeoutEnabled; this keeps every deadline of the package whatever
// the client's options. An abandoned f ends by the client's own timeouts;
// done, if not nil, is called when f returns.
func call(ctx context.Context, f func() (any, error), done func()) (any, error) {
	ch := make(chan reply, 1)
	go func() {
		if done != nil {
			defer done()
		}
		v, err := f()
		ch <- reply{v, err}
	}()
	v, err, _ := await(ctx, ch)
	return v, err
}

// await returns the reply ch delivers, or ctx's error as soon as ctx is
// done, whichever comes first; ok says whether the reply came.
func await(ctx context.Context, ch <-chan reply) (v any, err error, ok bool) {
	select {
	case r := <-ch:
		return r.v, r.err, true
	case <-ctx.Done():
		return nil, ctx.Err(), false
	}
}
