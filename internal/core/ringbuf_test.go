package core

import "testing"

// Tests of the ring buffers of the sliding log.

func TestRingPoolReusesAndCompacts(t *testing.T) {
	var p ringPool
	refs := map[uint32]uint32{}
	for c := uint32(1); c <= ringMaxShared*2; c *= 2 {
		ref, ok := p.alloc(c)
		if !ok {
			t.Fatal("alloc failed")
		}
		buf := p.ring(ref, c)
		for i := range buf {
			buf[i] = c
		}
		refs[ref] = c
	}
	for ref, c := range refs {
		for _, v := range p.ring(ref, c) {
			if v != c {
				t.Fatalf("ring of %d overwritten", c)
			}
		}
	}
	for ref, c := range refs {
		p.free(ref, c)
	}
	if p.liveWords != 0 {
		t.Fatalf("live words %d", p.liveWords)
	}
	ref, _ := p.alloc(4)
	if p.ring(ref, 4)[0] != 0 {
		t.Fatal("recycled ring not cleared")
	}
}
