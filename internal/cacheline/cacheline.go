// Package cacheline allocates per-worker arrays that no other worker's
// data shares a cache line with. Two workers' small arrays allocated one
// after the other land side by side in the same Go heap span, and a
// counter each writes per packet then bounces a line between cores (false
// sharing): on the reference machine that alone held two workers to 1.2x
// one.
package cacheline

import "unsafe"

// Size is the padding unit: two 64-byte lines, because x86 adjacent-line
// prefetch moves lines in pairs, which would otherwise still make two
// writers fight over the same pair.
const Size = 128

// Pad separates, inside a struct, fields that different goroutines
// write.
type Pad [Size]byte

// Make returns a slice of length n and capacity c (c >= n) whose backing
// array has Size bytes of unused padding before and after it.
func Make[T any](n, c int) []T {
	var zero T
	pad := Size
	if s := int(unsafe.Sizeof(zero)); s > 0 {
		pad = (Size + s - 1) / s
	}
	backing := make([]T, c+2*pad)
	return backing[pad : pad+n : pad+c]
}
