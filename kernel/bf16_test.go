package kernel

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

func f32(bits uint32) float32 { return math.Float32frombits(bits) }

func TestBF16FromFloat32EdgeCases(t *testing.T) {
	tests := []struct {
		desc string
		in   uint32 // float32 bits
		want BF16
	}{
		{"one is exact", 0x3F800000, 0x3F80},
		{"+0 stays +0", 0x00000000, 0x0000},
		{"-0 stays -0", 0x80000000, 0x8000},
		{"1+2^-8 is a tie, rounds down to even 1.0", 0x3F808000, 0x3F80},
		{"1+2^-7+2^-8 is a tie, rounds up to even 1+2^-6", 0x3F818000, 0x3F82},
		{"-(1+2^-8) tie rounds to even magnitude", 0xBF808000, 0xBF80},
		{"-(1+2^-7+2^-8) tie rounds magnitude up to even", 0xBF818000, 0xBF82},
		{"1+2^-8+2^-23 is above the tie, rounds up", 0x3F808001, 0x3F81},
		{"1+2^-8-2^-23 is below the tie, rounds down", 0x3F807FFF, 0x3F80},
		{"2-2^-23 rounds up across the binade to 2", 0x3FFFFFFF, 0x4000},
		{"largest finite bf16 is exact", 0x7F7F0000, 0x7F7F},
		{"just below the overflow tie stays finite", 0x7F7F7FFF, 0x7F7F},
		{"overflow tie rounds to even, which is +Inf", 0x7F7F8000, PosInf},
		{"MaxFloat32 overflows to +Inf", 0x7F7FFFFF, PosInf},
		{"-MaxFloat32 overflows to -Inf", 0xFF7FFFFF, NegInf},
		{"+Inf stays", 0x7F800000, PosInf},
		{"-Inf stays", 0xFF800000, NegInf},
		{"smallest bf16 subnormal 2^-133 is exact", 0x00010000, 0x0001},
		{"2^-134 is a tie between 0 and 2^-133, rounds to even 0", 0x00008000, 0x0000},
		{"-2^-134 ties to -0", 0x80008000, 0x8000},
		{"just above 2^-134 rounds up to 2^-133", 0x00008001, 0x0001},
		{"3*2^-134 ties up to even 2^-132", 0x00018000, 0x0002},
		{"smallest float32 subnormal rounds to 0", 0x00000001, 0x0000},
		{"largest float32 subnormal rounds up to the smallest normal", 0x007FFFFF, 0x0080},
		{"largest bf16 subnormal is exact", 0x007F0000, 0x007F},
		{"quiet NaN stays", 0x7FC00000, 0x7FC0},
		{"negative quiet NaN keeps its sign", 0xFFC00000, 0xFFC0},
		{"signalling NaN with low payload only is quieted, not Inf", 0x7F800001, 0x7FC0},
		{"signalling NaN keeps top payload bits and is quieted", 0x7FA00000, 0x7FE0},
		{"negative NaN with payload keeps sign and payload", 0xFF812345, 0xFFC1},
		{"NaN payload must not carry into the sign", 0x7FFFFFFF, 0x7FFF},
	}
	for _, tc := range tests {
		if got := BF16FromFloat32(f32(tc.in)); got != tc.want {
			t.Errorf("%s: BF16FromFloat32(%#08x) = %#04x, want %#04x", tc.desc, tc.in, uint16(got), uint16(tc.want))
		}
	}
}

func TestBF16Float32(t *testing.T) {
	tests := []struct {
		desc string
		in   BF16
		want float32
	}{
		{"one", 0x3F80, 1},
		{"minus two", 0xC000, -2},
		{"1+2^-7 (one ulp above one)", 0x3F81, 1 + 1.0/128},
		{"largest finite", MaxFinite, float32(math.Ldexp(2-1.0/128, 127))},
		{"smallest subnormal", 0x0001, float32(math.Ldexp(1, -133))},
		{"smallest normal", 0x0080, float32(math.Ldexp(1, -126))},
		{"+Inf", PosInf, float32(math.Inf(1))},
	}
	for _, tc := range tests {
		if got := tc.in.Float32(); got != tc.want {
			t.Errorf("%s: %#04x.Float32() = %g, want %g", tc.desc, uint16(tc.in), got, tc.want)
		}
		if got := tc.in.Float64(); got != float64(tc.want) {
			t.Errorf("%s: %#04x.Float64() = %g, want %g", tc.desc, uint16(tc.in), got, tc.want)
		}
	}
	if got := NegZero.Float32(); got != 0 || !math.Signbit(float64(got)) {
		t.Errorf("NegZero.Float32() = %g (signbit %v), want -0", got, math.Signbit(float64(got)))
	}
	if !QuietNaN.IsNaN() || PosInf.IsNaN() || !NegInf.IsInf() || MaxFinite.IsInf() || !BF16(0xFF81).IsNaN() {
		t.Error("IsNaN/IsInf disagree with the bit patterns")
	}
}

// exactBF16 rounds a finite or infinite float64 to bf16 with math/big and
// integer arithmetic, independently of the bit tricks under test.
func exactBF16(t *testing.T, f float64) BF16 {
	t.Helper()
	if math.IsNaN(f) {
		t.Fatal("exactBF16 does not take NaN")
	}
	var sign BF16
	if math.Signbit(f) {
		sign = 0x8000
	}
	a := math.Abs(f)
	var r float64
	switch {
	case math.IsInf(a, 0):
		return sign | PosInf
	case a < 0x1p-126: // subnormal range: a fixed quantum of 2^-133
		q := a * 0x1p133 // exact: a power-of-two scaling well inside float64's range
		if q*0x1p-133 != a {
			t.Fatalf("scaling %g is not exact", a)
		}
		r = math.RoundToEven(q) * 0x1p-133
	default: // 8 significant bits, unbounded exponent
		bf := new(big.Float).SetPrec(8).SetMode(big.ToNearestEven).SetFloat64(a)
		r, _ = bf.Float64()
	}
	if r >= 0x1p128 {
		return sign | PosInf
	}
	bits := math.Float32bits(float32(r))
	if float64(float32(r)) != r || bits&0xFFFF != 0 {
		t.Fatalf("rounded value %g of %g is not a bf16", r, f)
	}
	return sign | BF16(bits>>16)
}

func TestBF16FromFloat32MatchesExactRounding(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	check := func(bits uint32) {
		f := f32(bits)
		got := BF16FromFloat32(f)
		if math.IsNaN(float64(f)) {
			if !got.IsNaN() || got&0x8000 != BF16(bits>>16)&0x8000 {
				t.Fatalf("BF16FromFloat32(%#08x) = %#04x, want a NaN of the same sign", bits, uint16(got))
			}
			return
		}
		if want := exactBF16(t, float64(f)); got != want {
			t.Fatalf("BF16FromFloat32(%#08x = %g) = %#04x, want %#04x", bits, f, uint16(got), uint16(want))
		}
		// Round trip: a bf16 value widened and narrowed again is itself.
		if back := BF16FromFloat32(got.Float32()); back != got {
			t.Fatalf("round trip of %#04x gave %#04x", uint16(got), uint16(back))
		}
	}
	// Every bf16 with the dropped half exact, at and around the tie, and full.
	for hi := range uint32(1 << 16) {
		for _, lo := range []uint32{0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF} {
			check(hi<<16 | lo)
		}
	}
	for range 200000 {
		check(rng.Uint32())
	}
}

func TestBF16FromFloat64MatchesExactRounding(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	check := func(f float64) {
		got := BF16FromFloat64(f)
		if want := exactBF16(t, f); got != want {
			t.Fatalf("BF16FromFloat64(%b = %g) = %#04x, want %#04x (float32 path gives %#04x)",
				f, f, uint16(got), uint16(want), uint16(BF16FromFloat32(float32(f))))
		}
	}
	for range 100000 {
		// Random significand, exponent from deep subnormal to past overflow.
		f := math.Ldexp(1+rng.Float64(), rng.IntN(300)-160)
		if rng.IntN(2) == 0 {
			f = -f
		}
		check(f)
		// Around the midpoint between f's bf16 neighbours: the cases where
		// rounding through float32 first would round twice.
		b := BF16FromFloat64(f) &^ 0x8000
		if b >= MaxFinite {
			continue
		}
		mid := (b.Float64() + (b + 1).Float64()) / 2
		for _, g := range []float64{mid, math.Nextafter(mid, 0), math.Nextafter(mid, math.Inf(1)), mid * (1 + 0x1p-40), mid * (1 - 0x1p-40)} {
			check(g)
			check(-g)
		}
	}
	for _, f := range []float64{0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.MaxFloat64, 0x1p-1074, math.MaxFloat32, 0x1p128 - 0x1p119, 0x1p128 - 0x1p119 - 0x1p100} {
		check(f)
	}
	if !BF16FromFloat64(math.NaN()).IsNaN() {
		t.Error("BF16FromFloat64(NaN) is not NaN")
	}
}

func TestSanitizeWord(t *testing.T) {
	tests := []struct {
		desc     string
		in, want uint32
	}{
		{"sentinel becomes zero", Sentinel, 0},
		{"-0 in the low half", 0x3F808000, 0x3F800000},
		{"-0 in the high half", 0x80003F80, 0x00003F80},
		{"+0 pair unchanged", 0, 0},
		{"ordinary values unchanged", 0xBF803F80, 0xBF803F80},
		{"negative tiny value is not -0", 0x80018001, 0x80018001},
		{"NaNs unchanged", 0xFFC07FC0, 0xFFC07FC0},
	}
	for _, tc := range tests {
		if got := SanitizeWord(tc.in); got != tc.want {
			t.Errorf("%s: SanitizeWord(%#08x) = %#08x, want %#08x", tc.desc, tc.in, got, tc.want)
		}
	}
	// Property: never the sentinel, and only -0 halves change.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	for range 100000 {
		w := rng.Uint32()
		if rng.IntN(4) == 0 {
			w = w&0xFFFF0000 | 0x8000
		}
		got := SanitizeWord(w)
		if got == Sentinel {
			t.Fatalf("SanitizeWord(%#08x) returned the sentinel", w)
		}
		for _, sh := range []uint{0, 16} {
			in, out := (w>>sh)&0xFFFF, (got>>sh)&0xFFFF
			if (in == 0x8000 && out != 0) || (in != 0x8000 && out != in) {
				t.Fatalf("SanitizeWord(%#08x) = %#08x: half at bit %d wrong", w, got, sh)
			}
		}
	}
}

func TestPackWords(t *testing.T) {
	src := []BF16{0x3F80, NegZero, NegZero, NegZero, 0xC000, 0x4000, 0x1234}
	dst := []uint32{Sentinel, Sentinel, Sentinel, Sentinel}
	if n := PackWords(dst, src); n != 3 {
		t.Fatalf("PackWords wrote %d words, want 3 (odd tail left out)", n)
	}
	want := []uint32{0x00003F80, 0, 0x4000C000, Sentinel}
	for i := range want {
		if dst[i] != want[i] {
			t.Errorf("word %d = %#08x, want %#08x", i, dst[i], want[i])
		}
	}
	if e, o := UnpackWord(PackWord(0x1111, 0x2222)); e != 0x1111 || o != 0x2222 {
		t.Errorf("UnpackWord(PackWord) = %#x, %#x", e, o)
	}
}

func TestSliceConversions(t *testing.T) {
	src := []float32{1, -2.5, 1 + 1.0/256, float32(math.Inf(-1))}
	dst := make([]BF16, 3)
	if n := FromFloat32s(dst, src); n != 3 || dst[0] != 0x3F80 || dst[1] != 0xC020 || dst[2] != 0x3F80 {
		t.Errorf("FromFloat32s = %d, %#x", n, dst)
	}
	back := make([]float32, 5)
	if n := ToFloat32s(back, dst); n != 3 || back[0] != 1 || back[1] != -2.5 || back[2] != 1 || back[3] != 0 {
		t.Errorf("ToFloat32s = %d, %v", n, back)
	}
}
