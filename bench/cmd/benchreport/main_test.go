package main

import (
	"strings"
	"testing"
)

// A scenario and its Now twin share the fastest peer of the two as the
// reference; "× same call" compares with the fastest peer of the scenario
// itself, and is left out where that is the reference.
func TestWriteRatios(t *testing.T) {
	const csv = `,sec/op,CI
HotKey/shardlimit_gcra-2,4e-08,
HotKey/sethvargo-2,8e-08,
HotKeyNow/shardlimit_gcra-2,2e-08,
HotKeyNow/xtime_mutex-2,5e-08,
`
	rows, err := parse(strings.NewReader(csv))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	write(&b, rows)
	out := b.String()
	for _, want := range []string{
		"Reference: HotKeyNow/xtime_mutex, 50 ns/op; same call: sethvargo, 80 ns/op.",
		"| **shardlimit_gcra** | 40 | 0.80 | 0.50 |",
		"| sethvargo | 80 | 1.60 | 1.00 |",
		"### HotKeyNow (GOMAXPROCS=2)\n\nReference: HotKeyNow/xtime_mutex, 50 ns/op.\n",
		"| **shardlimit_gcra** | 20 | 0.40 |\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}
