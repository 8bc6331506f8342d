package redistest

import (
	"bufio"
	"net"
	"strings"
	"sync"
	"testing"
)

// NoReply, returned by a FakeServer handler, sends nothing for the command.
var NoReply = []byte{}

// FakeServer is a loopback TCP server that speaks enough RESP for a go-redis
// client to connect, and answers commands with whatever bytes its handler
// returns: the way to feed a client replies no real Redis would give.
type FakeServer struct {
	// Addr is host:port on 127.0.0.1.
	Addr string

	ln      net.Listener
	handler func(args []string) []byte
	wg      sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// StartFake starts a FakeServer. For each command, handler receives its
// arguments (the name as sent, e.g. "evalsha") and returns the raw reply
// bytes, NoReply, or nil for the default: HELLO is refused as an unknown
// command (so go-redis falls back to RESP2), PING answers +PONG, everything
// else +OK. The handler may be called from several goroutines at once. The
// test's cleanup stops the server.
func StartFake(t testing.TB, handler func(args []string) []byte) *FakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: fake listen: %v", err)
	}
	f := &FakeServer{Addr: ln.Addr().String(), ln: ln, handler: handler, conns: make(map[net.Conn]struct{})}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.Close)
	return f
}

// Close stops the server and waits for its goroutines. It is idempotent.
func (f *FakeServer) Close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	f.ln.Close()
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

func (f *FakeServer) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			c.Close()
			return
		}
		f.conns[c] = struct{}{}
		f.mu.Unlock()
		f.wg.Add(1)
		go f.serve(c)
	}
}

func (f *FakeServer) serve(c net.Conn) {
	defer f.wg.Done()
	defer func() {
		f.mu.Lock()
		delete(f.conns, c)
		f.mu.Unlock()
		c.Close()
	}()
	r := bufio.NewReader(c)
	for {
		args, err := ReadCommand(r)
		if err != nil {
			return
		}
		if len(args) == 0 {
			continue
		}
		var reply []byte
		if f.handler != nil {
			reply = f.handler(args)
		}
		if reply == nil {
			switch strings.ToUpper(args[0]) {
			case "HELLO":
				reply = []byte("-ERR unknown command 'HELLO'\r\n")
			case "PING":
				reply = []byte("+PONG\r\n")
			default:
				reply = []byte("+OK\r\n")
			}
		}
		if len(reply) > 0 {
			if _, err := c.Write(reply); err != nil {
				return
			}
		}
	}
}
