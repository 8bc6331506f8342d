package mwtest

import (
	"net/http"
	"reflect"
	"testing"
)

// TestParseIETF checks that the rate-limit fields are read as structured
// field Lists, strictly, and held to the draft's shape: the checks of
// every header test rest on it.
func TestParseIETF(t *testing.T) {
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return h
	}
	pols, svcs, err := ParseIETF(hdr(RLPolicy, `"burst";q=100;w=60, "daily";q=1000;w=86400`, RL, `"burst";r=0;t=7`))
	wantP := []Policy{{"burst", 100, 60}, {"daily", 1000, 86400}}
	wantS := []Service{{"burst", 0, 7}}
	if err != nil || !reflect.DeepEqual(pols, wantP) || !reflect.DeepEqual(svcs, wantS) {
		t.Errorf("ParseIETF = %v, %v, %v; want %v, %v", pols, svcs, err, wantP, wantS)
	}
	if pols, svcs, err := ParseIETF(hdr()); err != nil || pols != nil || svcs != nil {
		t.Errorf("ParseIETF of no field = %v, %v, %v", pols, svcs, err)
	}
	for _, h := range []http.Header{
		hdr(RLPolicy, `"a";q=1;w=1,`),                         // trailing comma
		hdr(RLPolicy, `"a";q=1;w=1 "b";q=1;w=1`),              // no comma
		hdr(RLPolicy, "\"caf\u00e9\";q=1;w=1"),                // not ASCII
		hdr(RLPolicy, `"a";q=1;w=1`, RLPolicy, `"b";q=1;w=1`), // sent twice
		hdr(RLPolicy, ``),                                     // empty list
		hdr(RLPolicy, `a;q=1;w=1`),                            // a Token, not a String
		hdr(RLPolicy, `("a");q=1;w=1`),                        // an inner list
		hdr(RLPolicy, `"a";q=1`),                              // w missing
		hdr(RLPolicy, `"a";q=1;w=0`),                          // w not positive
		hdr(RLPolicy, `"a";q=1.5;w=1`),                        // a Decimal q
		hdr(RLPolicy, `"a";q=1;w=1;x=2`),                      // another parameter
		hdr(RLPolicy, `"a";q=1;w=1, "a";q=2;w=2`),             // one name twice
		hdr(RL, `"a";r=-1;t=1`),                               // r negative
		hdr(RLPolicy, `"a";q=1;w=1`, RL, `"b";r=0;t=1`),       // b not a policy
	} {
		if pols, svcs, err := ParseIETF(h); err == nil {
			t.Errorf("ParseIETF(%v) = %v, %v; want an error", h, pols, svcs)
		}
	}
}
