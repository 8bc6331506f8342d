package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DoTimeout bounds one Do call: dial, write and read.
const DoTimeout = 5 * time.Second

// Do sends one command to the Redis at addr over a fresh connection of a
// go-redis client of its own (RESP2, no retry, no routing, so helpers can
// use it on nodes a Cluster client would route around) and returns its
// reply: string (simple or bulk), nil (null), int64, []any, or an error
// reply as the error (a redis.Error). The client's handshake (HELLO) is
// left out of what a Monitor collects. Safe for concurrent use; bounded by
// DoTimeout.
func Do(addr string, args ...string) (any, error) {
	var d net.Dialer
	c := redis.NewClient(&redis.Options{
		Addr:            addr,
		Protocol:        2,
		DisableIdentity: true,
		MaxRetries:      -1,
		PoolSize:        1,
		DialTimeout:     DoTimeout,
		ReadTimeout:     DoTimeout,
		WriteTimeout:    DoTimeout,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, network, addr)
			if err == nil {
				doConns.add(conn.LocalAddr().String())
			}
			return conn, err
		},
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), DoTimeout)
	defer cancel()
	cmd := make([]any, len(args))
	for i, a := range args {
		cmd[i] = a
	}
	v, err := c.Do(ctx, cmd...).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return v, err
}

// doConns holds the local addresses of Do's connections of the last
// minute, so that a Monitor can leave out their handshake.
var doConns connSet

// connSet is a set of local addresses, each kept a minute (a closed
// connection's port is not reused sooner: TIME_WAIT).
type connSet struct {
	mu sync.Mutex
	at map[string]time.Time // address -> when added
}

func (s *connSet) add(addr string) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at == nil {
		s.at = map[string]time.Time{}
	}
	if len(s.at) >= 1024 {
		for a, t := range s.at {
			if now.Sub(t) > time.Minute {
				delete(s.at, a)
			}
		}
	}
	s.at[addr] = now
}

func (s *connSet) has(addr string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.at[addr]
	return ok
}

// DoString is Do for a command whose reply is a string.
func DoString(addr string, args ...string) (string, error) {
	v, err := Do(addr, args...)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("redistest: %s: reply %T, want a string", strings.Join(args, " "), v)
	}
	return s, nil
}

// AppendCommand appends args as a RESP array of bulk strings to b.
func AppendCommand(b []byte, args ...string) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = AppendBulk(b, a)
	}
	return b
}

// AppendBulk appends s as a RESP bulk string to b.
func AppendBulk(b []byte, s string) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// maxBulk bounds a bulk string or array read by this package's readers.
const maxBulk = 64 << 20

func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if !strings.HasSuffix(line, "\r\n") {
		return "", errors.New("redistest: line without CRLF")
	}
	return line[:len(line)-2], nil
}

// ReadCommand reads one client command: a RESP array of bulk strings, or an
// inline command (space-separated words on one line).
func ReadCommand(r *bufio.Reader) ([]string, error) {
	line, err := readLine(r)
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return strings.Fields(line), nil
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 0 || n > maxBulk {
		return nil, fmt.Errorf("redistest: bad command length %q", line)
	}
	args := make([]string, n)
	for i := range args {
		h, err := readLine(r)
		if err != nil {
			return nil, err
		}
		if !strings.HasPrefix(h, "$") {
			return nil, fmt.Errorf("redistest: bad bulk header %q", h)
		}
		m, err := strconv.Atoi(h[1:])
		if err != nil || m < 0 || m > maxBulk {
			return nil, fmt.Errorf("redistest: bad bulk length %q", h)
		}
		buf := make([]byte, m+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:m])
	}
	return args, nil
}

// ReadReply appends one whole RESP2 or RESP3 reply from r to dst, as it
// came (nested arrays, maps, sets, pushes and attributes included).
func ReadReply(r *bufio.Reader, dst []byte) ([]byte, error) {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return dst, err
	}
	dst = append(dst, line...)
	if len(line) < 3 {
		return dst, fmt.Errorf("redistest: short reply line %q", line)
	}
	if !strings.ContainsRune("$!=*~>%|", rune(line[0])) {
		return dst, nil // a line of its own: status, error, integer, double, ...
	}
	n, _ := strconv.Atoi(string(line[1 : len(line)-2]))
	if n > maxBulk {
		return dst, fmt.Errorf("redistest: reply length %d", n)
	}
	switch line[0] {
	case '$', '!', '=':
		if n < 0 {
			return dst, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return dst, err
		}
		return append(dst, buf...), nil
	case '*', '~', '>', '%', '|':
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		for range max(n, 0) {
			if dst, err = ReadReply(r, dst); err != nil {
				return dst, err
			}
		}
		if line[0] == '|' { // attributes precede the reply they describe
			return ReadReply(r, dst)
		}
	}
	return dst, nil
}

// ParseMonitorLine splits a MONITOR line such as
//
//	+1700000000.123456 [0 127.0.0.1:5555] "EVALSHA" "ab" "1" "k{x}:1"
//
// into the command's arguments, undoing Redis's quoting (\", \\, \n, \r,
// \t, \a, \b, \xHH). It returns ok false for a line that is not a command.
func ParseMonitorLine(line string) (args []string, ok bool) {
	_, args, ok = parseMonitorLine(line)
	return args, ok
}

// parseMonitorLine is ParseMonitorLine; it also returns the address of the
// client that sent the command ("127.0.0.1:5555"; "lua" inside a script).
func parseMonitorLine(line string) (from string, args []string, ok bool) {
	i := strings.Index(line, "] ")
	if i < 0 {
		return "", nil, false
	}
	from = line[strings.LastIndexByte(line[:i], ' ')+1 : i]
	s := line[i+2:]
	for len(s) > 0 {
		if s[0] == ' ' {
			s = s[1:]
			continue
		}
		var arg string
		if arg, s, ok = unquote(s); !ok {
			return "", nil, false
		}
		args = append(args, arg)
	}
	return from, args, len(args) > 0
}

// unquote takes the quoted argument that s starts with and returns it
// unquoted and the rest of s after its closing quote, or ok false if s
// does not start with a quoted argument.
func unquote(s string) (arg, rest string, ok bool) {
	if s == "" || s[0] != '"' {
		return "", "", false
	}
	var b strings.Builder
	j := 1
	for ; j < len(s) && s[j] != '"'; j++ {
		if s[j] != '\\' || j+1 >= len(s) {
			b.WriteByte(s[j])
			continue
		}
		j++
		j += unescape(&b, s, j)
	}
	if j >= len(s) {
		return "", "", false
	}
	return b.String(), s[j+1:], true
}

// unescape writes the byte of the escape sequence whose letter is s[j] (the
// one after a backslash) to b and returns how many bytes after s[j] it
// took: 2 for \xHH, else 0.
func unescape(b *strings.Builder, s string, j int) int {
	switch s[j] {
	case 'n':
		b.WriteByte('\n')
	case 'r':
		b.WriteByte('\r')
	case 't':
		b.WriteByte('\t')
	case 'a':
		b.WriteByte('\a')
	case 'b':
		b.WriteByte('\b')
	case 'x':
		if j+2 < len(s) {
			if v, err := strconv.ParseUint(s[j+1:j+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				return 2
			}
		}
		b.WriteByte('x')
	default:
		b.WriteByte(s[j])
	}
	return 0
}
