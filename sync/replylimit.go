package sync

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/shardlimit/shardlimit"
)

// DefaultMaxReplyBytes is the bound LimitReplies applies when given 0:
// 4 MiB, above the largest reply this package asks for (the totals of a
// sliding counter of shardlimit.MaxBuckets buckets, about 3 MB by
// LimitReplies' measure) and far below what a hostile header such as
// *2147483647 makes go-redis allocate (32 GiB).
const DefaultMaxReplyBytes = 4 << 20

// maxReplyDepth bounds how deeply a reply's arrays may nest: go-redis reads
// nested arrays by recursion, so a reply nested a million deep would grow
// a goroutine's stack past Go's limit (a fatal error, not a panic).
const maxReplyDepth = 64

// elemBytes is what LimitReplies charges for each element of an array, set
// or map (two per map entry) when it reads the header: the interface value
// and the boxed value or string header go-redis allocates for it.
const elemBytes = 32

// Dialer is the type of go-redis's Options.Dialer (and of the Dialer of
// ClusterOptions, FailoverOptions, RingOptions and UniversalOptions).
type Dialer = func(ctx context.Context, network, addr string) (net.Conn, error)

// LimitReplies returns a Dialer for go-redis that dials through dial and
// bounds what a single reply may take on each connection: a reply whose
// headers declare more than maxBytes bytes (0 means DefaultMaxReplyBytes)
// or that nests arrays more than 64 deep fails the read with an error
// wrapping ErrBadReply, before go-redis allocates what the header declares,
// and go-redis then drops the connection. Without it a store (or anything
// that can answer in its place) can make the client allocate without
// limit: go-redis trusts the lengths a reply declares, so *2147483647 makes
// it allocate 32 GiB for one array, and $2147483647 2 GiB for one string.
//
// The measure is the reply's bytes on the wire plus what its headers
// declare: the length of each bulk string, and 32 bytes for each element
// of an array (64 for each map entry), counted when the header is read.
// It bounds a reply's memory in go-redis to a small multiple of maxBytes.
// Replies are scanned as they are read, one pass over bytes go-redis reads
// anyway (a few nanoseconds for a decision's reply); requests pass as they
// are. The bound applies to every command of the client, not only this
// package's: give it a maxBytes above the largest reply the application
// expects (a big CLUSTER SLOTS, a large GET).
//
// dial is the dialer to wrap, usually redis.NewDialer(opt) for the options
// being built (it honours their DialTimeout and TLSConfig); nil means a
// net.Dialer with a 5 s timeout. Typical use:
//
//	opt := &redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1}
//	opt.Dialer = shardsync.LimitReplies(redis.NewDialer(opt), 0)
//	client := redis.NewClient(opt)
//
// The returned Dialer is safe for concurrent use, as go-redis needs. With
// a negative maxBytes every dial fails with an error wrapping
// shardlimit.ErrInvalidConfig.
func LimitReplies(dial Dialer, maxBytes int) Dialer {
	if maxBytes < 0 {
		err := fmt.Errorf("%w: LimitReplies: negative maxBytes %d", shardlimit.ErrInvalidConfig, maxBytes)
		return func(context.Context, string, string) (net.Conn, error) { return nil, err }
	}
	if maxBytes == 0 {
		maxBytes = DefaultMaxReplyBytes
	}
	if dial == nil {
		d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 5 * time.Minute}
		dial = d.DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		lc := limitedConn{Conn: c, scan: respScanner{max: int64(maxBytes)}}
		if _, ok := c.(syscall.Conn); ok {
			return &limitedSysConn{lc}, nil
		}
		return &lc, nil
	}
}

// limitedSysConn is a limitedConn over a connection with a file descriptor
// (TCP, Unix). It exposes the descriptor, as the connection does, for
// go-redis's check of idle pooled connections, a peek that consumes
// nothing (MSG_PEEK): without it go-redis would hand out a connection the
// server has closed, and the command sent on it would fail.
type limitedSysConn struct{ limitedConn }

// SyscallConn returns the wrapped connection's raw connection.
func (c *limitedSysConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("shardlimit/sync: %T has no file descriptor", c.Conn)
	}
	return sc.SyscallConn()
}

// limitedConn is a connection whose reads are scanned by a respScanner.
// Like any net.Conn, one goroutine reads at a time (go-redis's own rule).
type limitedConn struct {
	net.Conn
	scan respScanner
	err  error // the reply that broke the bound; every later read fails
}

// Read reads from the connection and fails, returning nothing of what it
// read, as soon as the reply being read breaks the bound.
func (c *limitedConn) Read(b []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.Conn.Read(b)
	if n > 0 {
		if serr := c.scan.scan(b[:n]); serr != nil {
			c.err = serr
			return 0, serr
		}
	}
	return n, err
}

// States of respScanner.
const (
	scanType = iota // next byte starts a value: its type
	scanLine        // in a simple line (+, -, :, ...) until '\n'
	scanNum         // in a length header until '\n'
	scanBulk        // in a bulk string's payload and its CRLF
)

// respScanner follows a stream of RESP2 and RESP3 replies (see
// https://redis.io/docs/latest/develop/reference/protocol-spec/) byte by
// byte and reports the first reply that breaks its bound or its syntax.
type respScanner struct {
	max    int64 // bound of one top-level reply
	used   int64 // charged to the top-level reply being read
	state  uint8
	kind   byte  // type byte of the header or line being read
	num    int64 // length being parsed
	neg    bool  // it began with '-'
	cr     bool  // its '\r' was read
	digits int
	skip   int64 // bulk bytes (payload and CRLF) left
	depth  int
	left   [maxReplyDepth]int64 // elements left in each open aggregate
}

func (s *respScanner) fail(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadReply}, args...)...)
}

// charge adds n to the reply's bytes and checks the bound.
func (s *respScanner) charge(n int64) error {
	s.used += n
	if s.used > s.max || s.used < 0 {
		return s.fail("reply of more than %d bytes (its headers declare at least %d)", s.max, s.used)
	}
	return nil
}

// done records that a value ended: it counts in its aggregate, which may
// end too; at the top level the next reply starts afresh.
func (s *respScanner) done() {
	s.state = scanType
	for s.depth > 0 {
		s.left[s.depth-1]--
		if s.left[s.depth-1] > 0 {
			return
		}
		s.depth--
	}
	s.used = 0
}

// scan follows b, the next bytes of the stream.
func (s *respScanner) scan(b []byte) error {
	for i := 0; i < len(b); i++ {
		var err error
		switch s.state {
		case scanType:
			err = s.start(b[i])
		case scanLine:
			i, err = s.line(b, i)
		case scanNum:
			if err = s.charge(1); err == nil {
				err = s.header(b[i])
			}
		case scanBulk:
			i = s.bulk(b, i)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// start takes c, the type byte of the next value.
func (s *respScanner) start(c byte) error {
	if err := s.charge(1); err != nil {
		return err
	}
	s.kind = c
	switch c {
	case '+', '-', ':', ',', '#', '(', '_':
		s.state = scanLine
	case '$', '=', '!', '*', '~', '>', '%', '|':
		s.state, s.num, s.neg, s.cr, s.digits = scanNum, 0, false, false, 0
	default:
		return s.fail("unknown reply type %q", c)
	}
	return nil
}

// line follows a simple line from b[i] up to its '\n' or the end of b,
// and returns the index of the last byte it took.
func (s *respScanner) line(b []byte, i int) (int, error) {
	// Charge the whole line at once: a line never breaks in a way that
	// matters, only its length does.
	j := i
	for j < len(b) && b[j] != '\n' {
		j++
	}
	if err := s.charge(int64(j - i + 1)); err != nil {
		return j, err
	}
	if j < len(b) {
		s.done()
	}
	return j, nil
}

// bulk skips the bulk payload (and CRLF) left from b[i] on, and returns
// the index of the last byte it took.
func (s *respScanner) bulk(b []byte, i int) int {
	k := min(int64(len(b)-i), s.skip)
	s.skip -= k
	if s.skip == 0 {
		s.done()
	}
	return i + int(k) - 1
}

// header takes the next byte c of a length header.
func (s *respScanner) header(c byte) error {
	switch {
	case s.cr:
		if c != '\n' {
			return s.fail("bad length in a %q header", s.kind)
		}
	case c == '-' && s.digits == 0 && !s.neg:
		s.neg = true
		return nil
	case c >= '0' && c <= '9' && s.digits < 18:
		s.num = s.num*10 + int64(c-'0')
		s.digits++
		return nil
	case c == '\r' && s.digits > 0:
		s.cr = true
		return nil
	default:
		return s.fail("bad length in a %q header", s.kind)
	}
	return s.length()
}

// length acts on a length header just read (s.num, s.neg): a null, a bulk
// string's payload to skip or an aggregate to open.
func (s *respScanner) length() error {
	if s.neg {
		if s.num != 1 {
			return s.fail("length -%d in a %q header", s.num, s.kind)
		}
		s.done() // a null
		return nil
	}
	switch s.kind {
	case '$', '=', '!':
		if err := s.charge(s.num + 2); err != nil {
			return err
		}
		s.state, s.skip = scanBulk, s.num+2
		return nil
	}
	n := s.num
	if s.kind == '%' || s.kind == '|' {
		n *= 2
	}
	return s.open(n)
}

// open starts an aggregate of n elements, charging each elemBytes.
func (s *respScanner) open(n int64) error {
	if n > s.max/elemBytes {
		return s.charge(s.max + 1)
	}
	if err := s.charge(n * elemBytes); err != nil {
		return err
	}
	if n == 0 {
		s.done()
		return nil
	}
	if s.depth == maxReplyDepth {
		return s.fail("arrays nested more than %d deep", maxReplyDepth)
	}
	s.left[s.depth] = n
	s.depth++
	s.state = scanType
	return nil
}
