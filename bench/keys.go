package bench

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
)

// KeySet is a set of distinct IPv4-like keys of 8 to 11 bytes ("10.7.3.21"),
// held without pointers (one string and an offset table) so that holding a
// million of them adds nothing to the garbage collector's mark work.
type KeySet struct {
	all  string
	allB []byte
	off  []uint32
}

// Len returns the number of keys.
func (k *KeySet) Len() int { return len(k.off) - 1 }

// Key returns key i as a string that shares the set's memory.
func (k *KeySet) Key(i int) string { return k.all[k.off[i]:k.off[i+1]] }

// Bytes returns key i as a []byte that shares the set's memory; callers
// must not modify it.
func (k *KeySet) Bytes(i int) []byte { return k.allB[k.off[i]:k.off[i+1]:k.off[i+1]] }

// MillionKeys is the number of keys in the many-key benchmarks, unless
// $SHARDLIMIT_BENCH_KEYS says otherwise (see Million).
const MillionKeys = 1_000_000

// EnvKeys names the environment variable that sets the number of keys of
// the many-key benchmarks; run.sh -smoke sets it to 10000, as the smoke run
// checks that every benchmark runs, not its numbers.
const EnvKeys = "SHARDLIMIT_BENCH_KEYS"

var million struct {
	sync.Once
	ks *KeySet
}

// Million returns the process's set of keys of the many-key benchmarks:
// MillionKeys keys, or $SHARDLIMIT_BENCH_KEYS if that is a positive number,
// built once (seed 1) and verified distinct. It panics on a malformed
// $SHARDLIMIT_BENCH_KEYS.
func Million() *KeySet {
	million.Do(func() {
		n := MillionKeys
		if v := os.Getenv(EnvKeys); v != "" {
			var err error
			if n, err = strconv.Atoi(v); err != nil || n <= 0 {
				panic(fmt.Sprintf("bench: %s=%q is not a positive number of keys", EnvKeys, v))
			}
		}
		ks, err := NewKeySet(n, 1)
		if err != nil {
			panic(err)
		}
		million.ks = ks
	})
	return million.ks
}

// NewKeySet returns n distinct keys drawn with the given seed: dotted IPv4
// addresses of 8 to 11 bytes, lengths spread evenly, in random order. It
// checks with a map that the keys are distinct and returns an error if they
// are not (or if n exceeds what 8 to 11 bytes can hold).
func NewKeySet(n int, seed uint64) (*KeySet, error) {
	if n < 0 || n > 50_000_000 {
		return nil, fmt.Errorf("bench: %d keys out of range", n)
	}
	rng := rand.New(rand.NewPCG(seed, 0x5ca1ab1e))
	seen := make(map[uint32]struct{}, n)
	buf := make([]byte, 0, n*10)
	off := make([]uint32, 1, n+1)
	// lo[d], hi[d]: the octets of d decimal digits.
	lo := [4]int{0, 0, 10, 100}
	hi := [4]int{0, 9, 99, 255}
	for len(off) <= n {
		// 8 to 11 bytes: 3 dots and 5 to 8 digits over 4 octets of 1 to
		// 3 digits each.
		extra := 1 + rng.IntN(4)
		var digits [4]int
		for i := range digits {
			digits[i] = 1
		}
		for extra > 0 {
			if i := rng.IntN(4); digits[i] < 3 {
				digits[i]++
				extra--
			}
		}
		var ip uint32
		for _, d := range digits {
			ip = ip<<8 | uint32(lo[d]+rng.IntN(hi[d]-lo[d]+1))
		}
		if _, dup := seen[ip]; dup {
			continue
		}
		seen[ip] = struct{}{}
		for i := 3; i >= 0; i-- {
			buf = strconv.AppendUint(buf, uint64(ip>>(8*i)&0xff), 10)
			if i > 0 {
				buf = append(buf, '.')
			}
		}
		off = append(off, uint32(len(buf)))
	}
	ks := &KeySet{all: string(buf), allB: buf, off: off}
	// The check the benchmarks rely on: n distinct strings.
	distinct := make(map[string]struct{}, n)
	for i := range n {
		k := ks.Key(i)
		if len(k) < 8 || len(k) > 11 {
			return nil, fmt.Errorf("bench: key %q is not 8 to 11 bytes", k)
		}
		distinct[k] = struct{}{}
	}
	if len(distinct) != n {
		return nil, fmt.Errorf("bench: %d of %d keys are distinct", len(distinct), n)
	}
	return ks, nil
}

// Arranged returns a new set holding the keys of k in the given order (key
// i of the result is key order[i] of k), copied into one new buffer: the
// keys as a server reads them from its request buffers, one after another
// in the order the requests arrive, which has nothing to do with the order
// the keys were first seen in. order must be a permutation of 0..k.Len()-1.
func (k *KeySet) Arranged(order []int32) *KeySet {
	buf := make([]byte, 0, len(k.allB))
	off := make([]uint32, 1, len(order)+1)
	for _, i := range order {
		buf = append(buf, k.Bytes(int(i))...)
		off = append(off, uint32(len(buf)))
	}
	return &KeySet{all: string(buf), allB: buf, off: off}
}
