package grpclimit

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/shardlimit/shardlimit/httplimit"
)

// openDuplex opens a FullDuplexCall stream, exchanges one message on it
// (the interceptor sets the fields in the header, which the server sends
// with its first message), and returns it with its header and the error
// of the exchange.
func (e *env) openDuplex(t *testing.T) (testpb.TestService_FullDuplexCallClient, metadata.MD, error) {
	t.Helper()
	st, err := e.client.FullDuplexCall(context.Background())
	if err != nil {
		t.Fatalf("FullDuplexCall: %v", err)
	}
	err = echo(st)
	h, _ := st.Header()
	return st, h, err
}

// echo sends one message on st and receives its echo: the stream's status
// if the server ended it (Send then fails with io.EOF, Recv tells why).
func echo(st testpb.TestService_FullDuplexCallClient) error {
	if err := st.Send(&testpb.StreamingOutputCallRequest{}); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	_, err := st.Recv()
	return err
}

// TestStreamLimitedWhenOpened: a stream is decided when it opens, its
// fields in its header; a denied stream ends ResourceExhausted with
// RetryInfo before any message; the messages of an admitted stream are
// not limited by default.
func TestStreamLimitedWhenOpened(t *testing.T) {
	clk := manual(0)
	e := start(t, setup{cfg: ServerConfig{Options: httplimit.Options{Clock: clk,
		Rules: rules(httplimit.Rule{Name: "duplex", Path: mDuplex, Limit: 1, Window: time.Minute})}}})
	st, h, err := e.openDuplex(t)
	if err != nil || first(h.Get("x-ratelimit-remaining")) != "0" {
		t.Fatalf("first stream: header %v, %v; want x-ratelimit-remaining 0", h, err)
	}
	for i := range 5 {
		if err := echo(st); err != nil {
			t.Fatalf("message %d more on the admitted stream: %v", i, err)
		}
	}
	_ = st.CloseSend()
	_, h2, err := e.openDuplex(t)
	a := read(h2, err)
	if a.code != codes.ResourceExhausted || a.retry.GetRetryDelay().AsDuration() != time.Minute || a.field("retry-after") != "60" {
		t.Errorf("second stream: %v %q, RetryInfo %v, retry-after %q; want ResourceExhausted, 1m, 60", a.code, a.msg, a.retry, a.field("retry-after"))
	}
	if _, err := st.Recv(); err == nil {
		t.Error("first stream: a message after CloseSend")
	}
}

// TestStreamPerMessage: with PerMessage every message the client sends is
// decided on the stream's rule and key; a denied one ends the stream
// ResourceExhausted with RetryInfo, and the budget counts the opening too.
func TestStreamPerMessage(t *testing.T) {
	clk := manual(0)
	e := start(t, setup{cfg: ServerConfig{PerMessage: true, Options: httplimit.Options{Clock: clk,
		Rules: rules(httplimit.Rule{Name: "duplex", Path: mDuplex, Limit: 4, Window: time.Minute})}}})
	st, h, err := e.openDuplex(t)
	if err != nil || first(h.Get("x-ratelimit-remaining")) != "3" {
		t.Fatalf("stream: header %v, %v; want x-ratelimit-remaining 3 (the opening's)", h, err)
	}
	for i := range 2 { // the opening and 3 messages fill the limit of 4
		if err := echo(st); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	err = echo(st)
	a := read(nil, err)
	if a.code != codes.ResourceExhausted || a.retry.GetRetryDelay().AsDuration() != time.Minute || a.quota == nil {
		t.Errorf("4th message: %v %q, RetryInfo %v, QuotaFailure %v; want ResourceExhausted, 1m, a violation", a.code, a.msg, a.retry, a.quota)
	}
	clk.Advance(time.Minute)
	st, _, err = e.openDuplex(t)
	if err != nil {
		t.Fatalf("a stream and its message in the next window: %v", err)
	}
	_ = st.CloseSend()
	if _, err := st.Recv(); err == nil {
		t.Error("a message after CloseSend")
	}
}

// TestStreamSkipAndUnlimited: a stream no rule matches passes without
// fields; Skip passes a stream untouched.
func TestStreamSkipAndUnlimited(t *testing.T) {
	e := start(t, setup{cfg: ServerConfig{
		Skip:    func(context.Context, string) bool { return true },
		Options: httplimit.Options{Clock: manual(0), Rules: rules(httplimit.Rule{Name: "duplex", Path: mDuplex, Limit: 0, Window: time.Minute})}}})
	st, h, err := e.openDuplex(t)
	if err != nil || len(h.Get("x-ratelimit-limit")) != 0 {
		t.Fatalf("skipped stream: header %v, %v", h, err)
	}
	if err := echo(st); err != nil {
		t.Errorf("skipped stream: %v", err)
	}
	_ = st.CloseSend()
	_, _ = st.Recv()
}

// TestPerMessageServerStreamCountsItsRequest: with PerMessage a
// server-streaming call counts twice, its opening and its one request
// message (as documented), where without it counts once.
func TestPerMessageServerStreamCountsItsRequest(t *testing.T) {
	for _, tc := range []struct {
		perMsg bool
		want   []codes.Code // the handler is unimplemented: Unimplemented means admitted
	}{
		{false, []codes.Code{codes.Unimplemented, codes.Unimplemented, codes.Unimplemented, codes.ResourceExhausted}},
		{true, []codes.Code{codes.Unimplemented, codes.ResourceExhausted, codes.ResourceExhausted}},
	} {
		e := start(t, setup{cfg: ServerConfig{PerMessage: tc.perMsg, Options: httplimit.Options{Clock: manual(0),
			Rules: rules(httplimit.Rule{Name: "svc", Prefix: service, Limit: 3, Window: time.Minute})}}})
		for i, want := range tc.want {
			st, err := e.client.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{})
			if err == nil {
				_, err = st.Recv()
			}
			if c := read(nil, err).code; c != want {
				t.Errorf("PerMessage %v: call %d: %v, want %v", tc.perMsg, i, c, want)
			}
		}
	}
}
