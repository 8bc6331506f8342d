package shardlimit

import (
	"errors"
	"reflect"
	"strings"
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

// TestNewWithoutAlgorithmSaysSo checks the error of the most common first
// mistake, a Config without an Algorithm.
func TestNewWithoutAlgorithmSaysSo(t *testing.T) {
	l, err := New(Config{Limit: 10, Window: time.Minute})
	if l != nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "Algorithm is not set") {
		t.Errorf("New(Config{Limit: 10, Window: time.Minute}) = %v, %v; want ErrInvalidConfig saying Algorithm is not set", l, err)
	}
}
