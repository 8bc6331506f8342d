package main

import (
	"net"
	"strings"
	"testing"
	"time"
)

// TestDemoLogHoldsNoClientBytesOfBadRequests sends requests fasthttp cannot
// parse, each carrying a secret, to a demo on 127.0.0.1 and checks that the
// log reports each connection's error without any of the bytes the client
// sent.
func TestDemoLogHoldsNoClientBytesOfBadRequests(t *testing.T) {
	d := startDemo(t)
	addr := strings.TrimPrefix(d.url, "http://")
	for _, req := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\nBad Header SECRET1\r\n\r\n",
		"GARBAGE SECRET2\r\n\r\n",
		"GET /SECRET3\x00 HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nX-\"SECRET4\": \"v\"\r\n\r\n",
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		var buf [512]byte
		c.Read(buf[:]) // the 400, or the close
		c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(d.stderr.String(), "http server") < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	log := d.stderr.String()
	if strings.Count(log, "http server") < 3 {
		t.Fatalf("want the bad requests logged; stderr:\n%s", log)
	}
	for _, secret := range []string{"SECRET", "GARBAGE", "Bad Header"} {
		if strings.Contains(log, secret) {
			t.Errorf("the log holds client bytes %q:\n%s", secret, log)
		}
	}
	if !strings.Contains(log, "request bytes redacted") {
		t.Errorf("no redaction in the log:\n%s", log)
	}
}

// TestRedactQuoted checks the redaction of quoted request bytes in a
// fasthttp error.
func TestRedactQuoted(t *testing.T) {
	for in, want := range map[string]string{
		`error when reading request headers: malformed mime header: missing colon: "Bad Header SECRET": buffer size=40`: `error when reading request headers: malformed mime header: missing colon: "(request bytes redacted)": buffer size=40`,
		`invalid request uri "/a\"b" in "GET /a\"b"`: `invalid request uri "(request bytes redacted)"`,
		`unmatched "SECRET`:                          `unmatched "(request bytes redacted)"`,
		`read: connection reset by peer`:             `read: connection reset by peer`,
	} {
		if got := redactQuoted(in); got != want {
			t.Errorf("redactQuoted(%q) = %q, want %q", in, got, want)
		}
	}
}
