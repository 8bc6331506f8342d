package core

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkMillionKeysArena: one million distinct keys inserted in one
// order, then decided one goroutine at a time in another (a fixed random
// permutation of it), the keys read from one arena as a server reads them
// from its request buffers; one rate and two (see benchRates), explicit
// now. Traffic does not revisit keys in the order they were first seen, so
// per-key state laid out in that order is read at random here, as it is in
// production. cpu-ns/op is the process's CPU time per decision, which a
// loaded machine's waits for a core do not inflate: compare rates=2 with
// rates=1 (target at most 1.5x) and the algorithms with each other.
func BenchmarkMillionKeysArena(b *testing.B) {
	keys := ipv4Keys(b)
	order := rand.New(rand.NewPCG(7, 11)).Perm(len(keys))
	var buf []byte
	off := make([]int, 1, len(keys)+1)
	for _, i := range order {
		buf = append(buf, keys[i]...)
		off = append(off, len(buf))
	}
	arena := string(buf)
	for _, alg := range allAlgorithms {
		for _, k := range []int{1, 2} {
			b.Run(fmt.Sprintf("%v/rates=%d", alg, k), func(b *testing.B) {
				rates, _ := benchRates(alg, k)
				l, err := New(Config{Algorithm: alg, Rates: rates, JanitorInterval: -1})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				for _, key := range keys {
					l.AllowN(key, benchNow, 1)
				}
				b.ReportAllocs()
				cpu0 := cpuTime()
				i := 0
				for b.Loop() {
					if !l.AllowAt(arena[off[i]:off[i+1]], benchNow) {
						b.Fatal("denied")
					}
					if i++; i == len(keys) {
						i = 0
					}
				}
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}
