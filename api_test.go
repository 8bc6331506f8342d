package shardlimit

import (
	"reflect"
	"testing"
	"time"
)

// TestLimitersExposeOnlyTheInterface checks that the value each
// constructor returns has exactly the Limiter's methods: a type assertion
// reaches no method of the internal limiter it holds.
func TestLimitersExposeOnlyTheInterface(t *testing.T) {
	iface := reflect.TypeFor[Limiter]()
	for _, alg := range allAlgorithms {
		l, err := New(Config{Algorithm: alg, Limit: 1, Window: time.Second, JanitorInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		typ := reflect.TypeOf(l)
		if typ.NumMethod() != iface.NumMethod() {
			for i := range typ.NumMethod() {
				if _, ok := iface.MethodByName(typ.Method(i).Name); !ok {
					t.Errorf("%v: %s has method %s, not the Limiter's", alg, typ, typ.Method(i).Name)
				}
			}
		}
	}
}
