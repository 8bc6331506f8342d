package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(StopAtExit(m),
		// Do's go-redis client starts this prober after dial errors (a
		// stopped server); after Close it notices the closed pool only
		// when its 1 s sleep ends.
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
	)
}

func TestParseMonitorLine(t *testing.T) {
	line := `+1700000000.123456 [0 127.0.0.1:5555] "EVALSHA" "ab\"c" "2" "p{a b}:1" "x\x00y\\z\n"`
	got, ok := ParseMonitorLine(line)
	want := []string{"EVALSHA", `ab"c`, "2", "p{a b}:1", "x\x00y\\z\n"}
	if !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseMonitorLine = %q, %v; want %q", got, ok, want)
	}
	if _, ok := ParseMonitorLine("+OK"); ok {
		t.Fatal("ParseMonitorLine(+OK) ok")
	}
}

// TestFakeServer checks the handshake defaults and a custom reply.
func TestFakeServer(t *testing.T) {
	f := StartFake(t, func(args []string) []byte {
		if args[0] == "GET" {
			return []byte("*2\r\n:1\r\n$3\r\nabc\r\n")
		}
		return nil
	})
	if _, err := Do(f.Addr, "HELLO", "3"); err == nil {
		t.Fatal("HELLO accepted, want an error reply")
	}
	v, err := Do(f.Addr, "GET", "k")
	if err != nil || !reflect.DeepEqual(v, []any{int64(1), "abc"}) {
		t.Fatalf("GET = %v, %v", v, err)
	}
}

// TestProxyModes drives one connection through every mode of the proxy in
// front of a fake server.
func TestProxyModes(t *testing.T) {
	f := StartFake(t, nil)
	p := StartProxy(t, f.Addr)
	c, err := net.DialTimeout("tcp", p.Addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	ping := func(timeout time.Duration) (time.Duration, error) {
		start := time.Now()
		_ = c.SetDeadline(start.Add(timeout))
		if _, err := c.Write(AppendCommand(nil, "PING")); err != nil {
			return 0, err
		}
		line, err := readLine(r)
		if err == nil && line != "+PONG" {
			err = errors.New("not PONG")
		}
		return time.Since(start), err
	}
	if _, err := ping(time.Second); err != nil {
		t.Fatalf("pass: %v", err)
	}
	p.SetDelay(100 * time.Millisecond)
	if d, err := ping(2 * time.Second); err != nil || d < 200*time.Millisecond {
		t.Fatalf("delay: %v after %v, want PONG after >= 200ms (both ways)", err, d)
	}
	p.SetMode(Blackhole)
	if _, err := ping(150 * time.Millisecond); err == nil {
		t.Fatal("blackhole: got a reply")
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("blackhole: %v, want a timeout", err)
	}
	p.SetMode(Drop)
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := r.ReadByte(); err == nil {
		t.Fatal("drop: connection still open")
	}
	// New connections are closed at once while dropping, served again after.
	c2, err := net.DialTimeout("tcp", p.Addr, time.Second)
	if err == nil {
		_ = c2.SetDeadline(time.Now().Add(time.Second))
		if _, err := bufio.NewReader(c2).ReadByte(); err == nil {
			t.Fatal("drop: new connection served")
		}
		c2.Close()
	}
	p.SetMode(Pass)
	if v, err := Do(p.Addr, "PING"); err != nil || v != "PONG" {
		t.Fatalf("pass again: %v, %v", v, err)
	}
}

// TestProxyHoldReplies: while the proxy holds replies a request reaches
// the server and its reply stops halfway; leaving the mode forwards the
// rest on the same connection.
func TestProxyHoldReplies(t *testing.T) {
	const reply = "$6\r\nabcdef\r\n"
	got := make(chan []string, 1)
	f := StartFake(t, func(args []string) []byte {
		if args[0] == "GET" {
			got <- args
			return []byte(reply)
		}
		return nil
	})
	p := StartProxy(t, f.Addr)
	c, err := net.DialTimeout("tcp", p.Addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p.SetMode(HoldReplies)
	if p.Mode() != HoldReplies || p.Mode().String() != "hold_replies" {
		t.Fatalf("mode %v", p.Mode())
	}
	if _, err := c.Write(AppendCommand(nil, "GET", "k")); err != nil {
		t.Fatal(err)
	}
	if args := <-got; !reflect.DeepEqual(args, []string{"GET", "k"}) {
		t.Fatalf("the server got %q", args)
	}
	half := make([]byte, len(reply)/2)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, half); err != nil || string(half) != reply[:len(half)] {
		t.Fatalf("first half: %q, %v", half, err)
	}
	// Held until the mode ends, however long: a short deadline can only
	// let a late byte pass unseen, never fail a correct proxy.
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("a held reply went on: %d bytes, %v", n, err)
	}
	p.SetMode(Pass)
	rest := make([]byte, len(reply)-len(half))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, rest); err != nil || string(rest) != reply[len(half):] {
		t.Fatalf("the rest: %q, %v", rest, err)
	}
	// A connection whose client leaves during a hold ends with it.
	p.SetMode(HoldReplies)
	c2, err := net.DialTimeout("tcp", p.Addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Write(AppendCommand(nil, "GET", "k")); err != nil {
		t.Fatal(err)
	}
	<-got
	c2.Close()
	// c and its server connection stay; c2's two go while the hold lasts.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		p.mu.Lock()
		n := len(p.conns)
		p.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections 10 s after the client left a hold, want 2", n)
		}
	}
}

// TestBlackholeWithoutUpstream: a blackhole accepts even when the target is
// down.
func TestBlackholeWithoutUpstream(t *testing.T) {
	p := StartProxy(t, "127.0.0.1:1")
	p.SetMode(Blackhole)
	c, err := net.DialTimeout("tcp", p.Addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write(AppendCommand(nil, "PING"))
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("blackhole answered")
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("blackhole: %v, want a timeout (connection kept open)", err)
	}
}

// TestServerRestart starts a private server, writes a key, restarts it and
// finds it empty.
func TestServerRestart(t *testing.T) {
	s := StartServer(t)
	if _, err := Do(s.Addr, "SET", "k", "1"); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if _, err := Do(s.Addr, "PING"); err == nil {
		t.Fatal("stopped server answers")
	}
	s.Start()
	if v, err := Do(s.Addr, "GET", "k"); err != nil || v != nil {
		t.Fatalf("GET after restart = %v, %v; want nil (empty)", v, err)
	}
}

func TestMonitor(t *testing.T) {
	s := StartServer(t)
	m := StartMonitor(t, s.Addr)
	if _, err := Do(s.Addr, "SET", "a{b}", "x y"); err != nil {
		t.Fatal(err)
	}
	// Sync alone waits for the SET: no sleep, no poll.
	if cmds := m.Sync(t); len(cmds) != 1 || !reflect.DeepEqual(cmds[0], []string{"SET", "a{b}", "x y"}) {
		t.Fatalf("monitor saw %q before the first sync", cmds)
	}
	if _, err := Do(s.Addr, "GET", "a{b}"); err != nil {
		t.Fatal(err)
	}
	if cmds := m.Sync(t); len(cmds) != 2 || cmds[1][0] != "GET" {
		t.Fatalf("monitor saw %q before the second sync", cmds)
	}
	cmds := m.Stop()
	if len(cmds) != 2 {
		t.Fatalf("Stop returned %q: the sync markers must not be in it", cmds)
	}
}

func TestRequireRedis(t *testing.T) {
	addr := RequireRedis(t)
	if v, err := Do(addr, "PING"); err != nil || v != "PONG" {
		t.Fatalf("PING = %v, %v", v, err)
	}
}

// TestKeySlot checks the slot function against values CLUSTER KEYSLOT
// gives, hash tags included, and keyInRanges against it.
func TestKeySlot(t *testing.T) {
	for key, want := range map[string]int{
		"123456789": 12739, "foo": 12182, "{foo}.bar": 12182, "a{foo}": 12182,
	} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
	if keySlot("{}foo") == 12182 || keySlot("x{}{foo}") == 12182 {
		t.Error("an empty hash tag is not a tag")
	}
	for _, ranges := range []string{"0-5460", "5461-10922", "10923-16383", "7 9000-9001"} {
		key, err := keyInRanges(ranges)
		if err != nil {
			t.Fatal(err)
		}
		s := keySlot(key)
		var lo, hi int
		inside := false
		for _, r := range strings.Fields(ranges) {
			if _, err := fmt.Sscanf(r, "%d-%d", &lo, &hi); err != nil {
				if _, err := fmt.Sscanf(r, "%d", &lo); err != nil {
					t.Fatal(err)
				}
				hi = lo
			}
			inside = inside || lo <= s && s <= hi
		}
		if !inside {
			t.Errorf("keyInRanges(%q) = %q of slot %d", ranges, key, s)
		}
	}
}
