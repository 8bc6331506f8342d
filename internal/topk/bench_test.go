package topk

import (
	"strconv"
	"testing"
)

// BenchmarkAdd measures one Add: "hit" a monitored item, "replace" a new
// item that replaces the least counted one (a flood of distinct keys).
func BenchmarkAdd(b *testing.B) {
	keys := make([][]byte, 4096)
	for i := range keys {
		keys[i] = []byte("ip:198.51.100." + strconv.Itoa(i))
	}
	for _, k := range []int{16, 100, 1000} {
		b.Run("hit/k="+strconv.Itoa(k), func(b *testing.B) {
			s := New(k, 64)
			b.ReportAllocs()
			for b.Loop() {
				s.Add("anon-bar", keys[0], 1)
			}
		})
		b.Run("replace/k="+strconv.Itoa(k), func(b *testing.B) {
			s := New(k, 64)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				s.Add("anon-bar", keys[i%len(keys)], 1)
				i++
			}
		})
	}
}
