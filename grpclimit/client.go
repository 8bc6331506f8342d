package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/outbound"
)

// ClientConfig configures the client interceptors of a Client. Pacer is
// required.
type ClientConfig struct {
	// Pacer paces the calls per key and holds keys (required): its
	// limiter holds the server's limit, and its FailFast says whether a
	// call waits for its turn or fails fast (see outbound.Config).
	Pacer *outbound.Pacer

	// Key returns a call's key from its context, full method
	// ("/pkg.Service/Method") and connection. Default KeyByMethod; see
	// also KeyByTarget. An error fails the call with codes.InvalidArgument
	// and an error wrapping outbound.ErrInvalidKey and the Key's error.
	// The string must stay valid after the call (a hold keeps it).
	Key func(ctx context.Context, method string, cc *grpc.ClientConn) (string, error)
}

// KeyByMethod keys a call by its full method, "/pkg.Service/Method": one
// budget per method, as servers that limit per method count.
func KeyByMethod(_ context.Context, method string, _ *grpc.ClientConn) (string, error) {
	return method, nil
}

// KeyByTarget keys a call by its connection's target (cc.Target()): one
// budget per server, whatever the method.
func KeyByTarget(_ context.Context, _ string, cc *grpc.ClientConn) (string, error) {
	return cc.Target(), nil
}

// Client holds the gRPC client interceptors that pace outgoing calls per
// key with an outbound.Pacer, the client side of the server's limits:
// before a call starts, UnaryClientInterceptor and StreamClientInterceptor
// take its turn from the Pacer (waiting for it in the call's context, or
// failing fast), and when a call (or a stream's RecvMsg) ends with
// codes.ResourceExhausted carrying google.rpc.RetryInfo, they hold the key
// for its retry_delay, so every later call on it waits (or fails fast)
// until the server's time. They never retry a call.
//
// A call the Pacer refuses is not sent; its error carries a gRPC status
// (status.Code and status.FromError read it) and wraps the Pacer's error
// (errors.Is finds outbound.ErrLimited and the rest):
// codes.ResourceExhausted, with a RetryInfo of the time until the call
// could succeed when that is known, for a call failed fast or that no wait
// can admit (shardlimit.ErrExceedsLimit); codes.DeadlineExceeded when the
// wait would outlast the call's deadline or the deadline passed while it
// waited; codes.Canceled when the context was cancelled;
// codes.InvalidArgument for a key that could not be made (ErrInvalidKey);
// codes.FailedPrecondition for a closed limiter; codes.Unknown otherwise.
// Safe for concurrent use.
type Client struct {
	pacer *outbound.Pacer
	key   func(ctx context.Context, method string, cc *grpc.ClientConn) (string, error)
}

// NewClient returns a Client for cfg. It returns an error wrapping
// outbound.ErrInvalidConfig if cfg.Pacer is nil.
func NewClient(cfg ClientConfig) (*Client, error) {
	if cfg.Pacer == nil {
		return nil, fmt.Errorf("%w: ClientConfig.Pacer is required", outbound.ErrInvalidConfig)
	}
	if cfg.Key == nil {
		cfg.Key = KeyByMethod
	}
	return &Client{pacer: cfg.Pacer, key: cfg.Key}, nil
}

// UnaryClientInterceptor returns the interceptor of unary calls: install
// it with grpc.WithChainUnaryInterceptor.
func (c *Client) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		key, err := c.take(ctx, method, cc)
		if err != nil {
			return err
		}
		err = invoker(ctx, method, req, reply, cc, opts...)
		c.observe(key, err)
		return err
	}
}

// StreamClientInterceptor returns the interceptor of streams: install it
// with grpc.WithChainStreamInterceptor. A stream takes one turn when it
// opens, not one per message; a ResourceExhausted with RetryInfo from
// opening it or from its RecvMsg holds its key.
func (c *Client) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		key, err := c.take(ctx, method, cc)
		if err != nil {
			return nil, err
		}
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			c.observe(key, err)
			return nil, err
		}
		return &clientStream{ClientStream: cs, c: c, key: key}, nil
	}
}

// take returns the call's key once the Pacer let it through, or the
// error that refuses it.
func (c *Client) take(ctx context.Context, method string, cc *grpc.ClientConn) (string, error) {
	key, err := c.key(ctx, method, cc)
	if err != nil {
		return "", refuse(fmt.Errorf("%w: %s: %w", outbound.ErrInvalidKey, method, err))
	}
	if err := c.pacer.Take(ctx, key, 1); err != nil {
		return "", refuse(err)
	}
	return key, nil
}

// observe holds key for the retry_delay of err's RetryInfo if err is a
// ResourceExhausted status that carries one.
func (c *Client) observe(key string, err error) {
	if err == nil || err == io.EOF {
		return
	}
	if d, ok := RetryDelay(err); ok {
		_ = c.pacer.HoldFor(key, d) // a key the Pacer refuses was refused by Take
	}
}

// RetryDelay returns the retry_delay of the google.rpc.RetryInfo that a
// codes.ResourceExhausted status error carries, and true; or 0 and false
// if err is no such status, has no RetryInfo or an invalid delay. With
// several RetryInfo details it returns the longest delay.
func RetryDelay(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return 0, false
	}
	var d time.Duration
	found := false
	for _, det := range st.Details() {
		ri, ok := det.(*errdetails.RetryInfo)
		if !ok || ri.GetRetryDelay().CheckValid() != nil {
			continue
		}
		d, found = max(d, ri.GetRetryDelay().AsDuration()), true
	}
	return d, found
}

// clientStream is a stream whose RecvMsg errors are observed.
type clientStream struct {
	grpc.ClientStream
	c   *Client
	key string
}

// RecvMsg receives a message, holding the key on a ResourceExhausted
// with RetryInfo.
func (s *clientStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	s.c.observe(s.key, err)
	return err
}

// refusedError is a call the Pacer refused: it wraps the Pacer's error
// and carries the gRPC status the call fails with.
type refusedError struct {
	err error
	st  *status.Status
}

func (e *refusedError) Error() string              { return e.err.Error() }
func (e *refusedError) Unwrap() error              { return e.err }
func (e *refusedError) GRPCStatus() *status.Status { return e.st }

// refuse returns err, the Pacer's, as the error of a refused call (see
// Client for the codes).
func refuse(err error) error {
	code := codes.Unknown
	switch {
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, shardlimit.ErrWouldExceedDeadline):
		code = codes.DeadlineExceeded
	case errors.Is(err, outbound.ErrLimited), errors.Is(err, shardlimit.ErrExceedsLimit):
		code = codes.ResourceExhausted
	case errors.Is(err, outbound.ErrInvalidKey): // shardlimit.ErrInvalidKey too
		code = codes.InvalidArgument
	case errors.Is(err, shardlimit.ErrClosed):
		code = codes.FailedPrecondition
	}
	st := status.New(code, err.Error())
	var le *outbound.LimitError
	if code == codes.ResourceExhausted && errors.As(err, &le) && le.RetryAfter != shardlimit.Never {
		if withInfo, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(le.RetryAfter)}); derr == nil {
			st = withInfo
		}
	}
	return &refusedError{err: err, st: st}
}
