package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// RespError is an error reply ("-ERR ...") read by Do.
type RespError string

// Error returns the reply's text.
func (e RespError) Error() string { return string(e) }

// DoTimeout bounds one Do call: dial, write and read.
const DoTimeout = 5 * time.Second

// Do sends one command to the Redis at addr over a fresh connection and
// returns its reply: string (simple or bulk), nil (null), int64, []any, or
// a RespError as the error. It needs no client library, so helpers can use
// it on nodes a go-redis client would route around. Safe for concurrent
// use; bounded by DoTimeout.
func Do(addr string, args ...string) (any, error) {
	c, err := net.DialTimeout("tcp", addr, DoTimeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(DoTimeout))
	if _, err := c.Write(AppendCommand(nil, args...)); err != nil {
		return nil, err
	}
	return ReadReply(bufio.NewReader(c))
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

// ReadReply reads one RESP2 reply (RESP3 maps, sets and doubles are read as
// arrays and strings).
func ReadReply(r *bufio.Reader) (any, error) {
	line, err := readLine(r)
	if err != nil {
		return nil, err
	}
	if line == "" {
		return nil, errors.New("redistest: empty reply line")
	}
	body := line[1:]
	switch line[0] {
	case '+', ',':
		return body, nil
	case '-':
		return nil, RespError(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '_':
		return nil, nil
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n > maxBulk {
			return nil, fmt.Errorf("redistest: bad bulk length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*', '~', '%':
		n, err := strconv.Atoi(body)
		if err != nil || n > maxBulk {
			return nil, fmt.Errorf("redistest: bad array length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		if line[0] == '%' {
			n *= 2
		}
		arr := make([]any, n)
		for i := range arr {
			v, err := ReadReply(r)
			var re RespError
			if err != nil && !errors.As(err, &re) {
				return nil, err
			}
			if err != nil {
				v = re
			}
			arr[i] = v
		}
		return arr, nil
	}
	return nil, fmt.Errorf("redistest: unknown reply type %q", line)
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

// ParseMonitorLine splits a MONITOR line such as
//
//	+1700000000.123456 [0 127.0.0.1:5555] "EVALSHA" "ab" "1" "k{x}:1"
//
// into the command's arguments, undoing Redis's quoting (\", \\, \n, \r,
// \t, \a, \b, \xHH). It returns ok false for a line that is not a command.
func ParseMonitorLine(line string) (args []string, ok bool) {
	i := strings.Index(line, "] ")
	if i < 0 {
		return nil, false
	}
	s := line[i+2:]
	for len(s) > 0 {
		if s[0] == ' ' {
			s = s[1:]
			continue
		}
		if s[0] != '"' {
			return nil, false
		}
		var b strings.Builder
		j := 1
		for ; j < len(s) && s[j] != '"'; j++ {
			c := s[j]
			if c != '\\' || j+1 >= len(s) {
				b.WriteByte(c)
				continue
			}
			j++
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
						j += 2
						continue
					}
				}
				b.WriteByte('x')
			default:
				b.WriteByte(s[j])
			}
		}
		if j >= len(s) {
			return nil, false
		}
		args = append(args, b.String())
		s = s[j+1:]
	}
	return args, len(args) > 0
}
