package main

import (
	"strings"
	"testing"

	"github.com/shardlimit/shardlimit/httplimit"
)

// TestStatusSettled checks the status page's table of settlements: the
// rules that settle after the handler, with their counts, and none when
// no rule settles.
func TestStatusSettled(t *testing.T) {
	var b strings.Builder
	writeSettled(&b, []httplimit.RuleStats{{Name: "plain"}})
	if b.Len() != 0 {
		t.Errorf("no rule settles, yet %q", b.String())
	}
	writeSettled(&b, []httplimit.RuleStats{
		{Name: "plain"},
		{Name: "login", Count: httplimit.CountFailed, Settles: true, Settled: httplimit.SettleStats{Refunded: 12}},
		{Name: "llm", CostHeader: "X-Tokens", Settles: true, Settled: httplimit.SettleStats{Charged: 300, Refunded: 4, BadReports: 1}},
	})
	got := b.String()
	for _, want := range []string{"settled after the handler:", "login  failed  -            12        0        0            0", "llm    all     X-Tokens     4         300      1            0"} {
		if !strings.Contains(got, want) {
			t.Errorf("status %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "plain") {
		t.Errorf("status lists rule plain, which does not settle:\n%s", got)
	}
}
