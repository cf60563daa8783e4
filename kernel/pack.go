package kernel

import "fmt"

// The packed weight layout (skinny.h, TPRUN_SKINNY_PACKED): rows in groups
// of 16, k in chunks of 32, one 512-element block per (group, chunk) in
// the order the kernel's MMA fragments use them, so that every 16-byte
// load of a warp reads 512 contiguous bytes. Rows past the shard and k
// past the latent dimension are zeros.
const (
	packRows  = 16
	packK     = 32
	packBlock = packRows * packK
)

// PackedWeightLen is the number of bf16 elements of a shard×latent weight
// in the packed layout: ceil(shard/16) * ceil(latent/32) * 512.
func PackedWeightLen(shard, latent int) int {
	return (shard + packRows - 1) / packRows * ((latent + packK - 1) / packK) * packBlock
}

// PackWeight writes w, a row-major [shard][latent] weight, into dst in the
// packed layout; dst must hold PackedWeightLen(shard, latent) elements
// (every one is written, padding with zeros). Element (n, k) goes to
//
//	(g*C + c)*512 + (q*32 + l)*8 + e
//
// with g = n/16, c = k/32, C = ceil(latent/32), l = 4*(n%8) + (k%32)/8,
// q = (k%8)/4 and e = 2*(2*((k%4)/2) + (n%16)/8) + k%2: lane l of a warp
// holds rows l/4 and l/4+8 of its 16-row group, k 8*(l%4) .. 8*(l%4)+7 of
// each 32-k chunk, and its 16 bytes q are the A fragment of the chunk's
// MMA q in register order: {row l/4, row l/4+8} × k pairs 4q+0..1, then
// the same for 4q+2..3 (skinny.h).
func PackWeight(dst, w []BF16, shard, latent int) error {
	if shard <= 0 || latent <= 0 {
		return fmt.Errorf("%w: pack a %d×%d weight", ErrShape, shard, latent)
	}
	if len(w) != shard*latent {
		return fmt.Errorf("kernel: pack weight: %d elements, want %d×%d = %d", len(w), shard, latent, shard*latent)
	}
	if n := PackedWeightLen(shard, latent); len(dst) != n {
		return fmt.Errorf("kernel: pack weight: destination of %d elements, want %d", len(dst), n)
	}
	clear(dst)
	chunks := (latent + packK - 1) / packK
	for n := range shard {
		for k, v := range w[n*latent : (n+1)*latent] {
			dst[packedIndex(n, k, chunks)] = v
		}
	}
	return nil
}

// packedIndex is where element (n, k) of the weight sits in the packed
// layout with chunks 32-k chunks a row (the formula of PackWeight).
func packedIndex(n, k, chunks int) int {
	g, c, l := n/packRows, k/packK, 4*(n%8)+(k%packK)/8
	q, e := (k%8)/4, 2*(2*((k%4)/2)+(n%packRows)/8)+k%2
	return (g*chunks+c)*packBlock + (q*32+l)*8 + e
}

// UnpackWeight is PackWeight's inverse: it writes the row-major
// [shard][latent] weight that the packed p (PackedWeightLen elements)
// holds into dst (shard*latent elements).
func UnpackWeight(dst, p []BF16, shard, latent int) error {
	if shard <= 0 || latent <= 0 {
		return fmt.Errorf("%w: unpack a %d×%d weight", ErrShape, shard, latent)
	}
	if len(dst) != shard*latent {
		return fmt.Errorf("kernel: unpack weight: destination of %d elements, want %d×%d = %d", len(dst), shard, latent, shard*latent)
	}
	if n := PackedWeightLen(shard, latent); len(p) != n {
		return fmt.Errorf("kernel: unpack weight: %d packed elements, want %d", len(p), n)
	}
	chunks := (latent + packK - 1) / packK
	for n := range shard {
		row := dst[n*latent : (n+1)*latent]
		for k := range row {
			row[k] = p[packedIndex(n, k, chunks)]
		}
	}
	return nil
}
