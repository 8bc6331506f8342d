package httplimit_test

import (
	"errors"
	"fmt"

	"github.com/shardlimit/shardlimit/httplimit"
)

// A rule file must limit something, or say that it does not on purpose.
func ExampleParseRules() {
	r, err := httplimit.ParseRules([]byte(`{"rules": [
		{"name": "api", "prefix": "/api", "algorithm": "sliding_log", "limit": 100, "window": "1m"}
	]}`))
	fmt.Println(r.NumRules(), r.Rules[0].Algorithm, r.Rules[0].Window, err)

	_, err = httplimit.ParseRules([]byte(`{"rules": []}`))
	fmt.Println(errors.Is(err, httplimit.ErrNoRules))

	r, err = httplimit.ParseRules([]byte(`{"limiting": "off"}`))
	fmt.Println(r.Limiting, r.NumRules(), err)
	// Output:
	// 1 sliding_log 1m0s <nil>
	// true
	// off 0 <nil>
}
