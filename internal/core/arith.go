package core

import "math/bits"

// mulDiv returns a*b/c and a*b%c computed in 128 bits, so a product of a
// limit, a cost and a window in nanoseconds cannot overflow. It requires
// a*b < c<<64 (the quotient fits in 64 bits); callers guarantee it.
func mulDiv(a, b, c uint64) (q, r uint64) {
	hi, lo := bits.Mul64(a, b)
	return bits.Div64(hi, lo, c)
}

// mulDivCeil returns ceil(a*b/c) under the conditions of mulDiv.
func mulDivCeil(a, b, c uint64) uint64 {
	q, r := mulDiv(a, b, c)
	if r != 0 {
		q++
	}
	return q
}

// floorDiv returns floor(a/b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}
