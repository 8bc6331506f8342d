package main

import (
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// TestStatusSaysWhenTheMostDeniedListIsCut denies 25 addresses once each
// (all listed: the summary tracks them exactly) and checks that the status
// page shows 20 of them and says that 5 more are left off, and what the
// rows shown still promise.
func TestStatusSaysWhenTheMostDeniedListIsCut(t *testing.T) {
	rules, err := httplimit.ParseRules([]byte(`{"rules": [{"name": "r", "path": "/x", "limit": 0, "window": "1m"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	mw, err := newMiddleware(rules, shardlimit.FixedWindow, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Close()
	h := mw.Wrap(app)
	for i := range topShown + 5 {
		var req fasthttp.Request
		req.SetRequestURI("http://demo/x")
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("192.0.2.%d", i+1)), Port: 1234}, nil)
		h(&ctx)
	}
	var b strings.Builder
	writeStatus(&b, mw, "in memory")
	p := b.String()
	rows := regexp.MustCompile(`(?m)^r +ip:\S+ +1 +1 +0$`).FindAllString(p, -1)
	if len(rows) != topShown || !strings.Contains(p, "\nand 5 more: the 20 shown have the greatest guaranteed counts of the 25 listed") {
		t.Errorf("25 addresses listed: want %d rows and \"and 5 more\":\n%s", topShown, p)
	}
}
