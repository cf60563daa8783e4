package kernel

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/tprun/tprun/internal/cuda"
)

// cField is one field of a parameter struct as skinny.h declares it.
type cField struct {
	name   string
	size   int // bytes of one element: 8 or 4
	count  int // array length, 1 for scalars
	offset int // from the "// offset N" comment
}

// parseParamsStruct reads the declaration of struct name from skinny.h:
// its fields with their commented offsets, and the size its static_assert
// promises. The Go encoders are checked against this, so a change of the
// header that the Go side does not follow fails here.
func parseParamsStruct(t *testing.T, name string) (fields []cField, size int) {
	t.Helper()
	src, err := os.ReadFile("skinny.h")
	if err != nil {
		t.Fatalf("reading the kernel ABI header: %v", err)
	}
	consts := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^#define (\w+) (\d+)\s*$`).FindAllStringSubmatch(string(src), -1) {
		consts[m[1]] = atoi(t, m[2])
	}
	fieldRE := regexp.MustCompile(`^\s*(unsigned long long|int)\s+(\w+)(?:\[(\w+)\])?;\s*//\s*offset\s+(\d+)`)
	in := false
	sc := bufio.NewScanner(strings.NewReader(string(src)))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "typedef struct "+name+" {") {
			in = true
			continue
		}
		if !in {
			continue
		}
		if strings.HasPrefix(line, "}") {
			break
		}
		m := fieldRE.FindStringSubmatch(line)
		if m == nil {
			if strings.TrimSpace(line) != "" && !strings.HasPrefix(strings.TrimSpace(line), "//") {
				t.Fatalf("skinny.h: %s: field line not understood: %q", name, line)
			}
			continue
		}
		f := cField{name: m[2], size: 4, count: 1, offset: atoi(t, m[4])}
		if m[1] == "unsigned long long" {
			f.size = 8
		}
		if m[3] != "" {
			n, ok := consts[m[3]]
			if !ok {
				n = atoi(t, m[3])
			}
			f.count = n
		}
		fields = append(fields, f)
	}
	sm := regexp.MustCompile(`static_assert\(sizeof\(` + name + `\) == (\d+)`).FindSubmatch(src)
	if len(fields) == 0 || sm == nil {
		t.Fatalf("skinny.h: struct %s or its size assertion not found", name)
	}
	return fields, atoi(t, string(sm[1]))
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("skinny.h: %q: %v", s, err)
	}
	return n
}

// checkLayout verifies that the commented offsets of skinny.h are what the
// C compiler makes of the declaration (cuda.Params applies the same rules)
// and that the struct size is sizeof.
func checkLayout(t *testing.T, name string, fields []cField, size, goSize int) {
	t.Helper()
	var p cuda.Params
	for _, f := range fields {
		for i := range f.count {
			if f.size == 8 {
				p.U64(0)
			} else {
				p.U32(0)
			}
			if start := p.Len() - f.size; i == 0 && start != f.offset {
				t.Errorf("%s.%s: header says offset %d, the declaration puts it at %d", name, f.name, f.offset, start)
			}
		}
	}
	if got := len(p.Bytes()); got != size || size != goSize {
		t.Errorf("%s: declared fields make %d bytes, static_assert says %d, Go encodes %d", name, got, size, goSize)
	}
}

// decodeFields reads every field of p at the header's offsets.
func decodeFields(fields []cField, p []byte) map[string][]uint64 {
	out := map[string][]uint64{}
	for _, f := range fields {
		for i := range f.count {
			off := f.offset + i*f.size
			if f.size == 8 {
				out[f.name] = append(out[f.name], binary.LittleEndian.Uint64(p[off:]))
			} else {
				out[f.name] = append(out[f.name], uint64(binary.LittleEndian.Uint32(p[off:])))
			}
		}
	}
	return out
}

func testRand(t *testing.T) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	return NewRand(seed)
}

// alignedPtr is a random 16-byte aligned device address above 4 GiB.
func alignedPtr(rng *rand.Rand) cuda.DevicePtr {
	return cuda.DevicePtr((1<<32 + rng.Uint64N(1<<40)) &^ 15)
}

func TestSkinnyParamsMatchHeader(t *testing.T) {
	fields, size := parseParamsStruct(t, "tprun_skinny_params")
	checkLayout(t, "tprun_skinny_params", fields, size, SkinnyParamsSize)
	rng := testRand(t)
	for _, ndst := range []int{1, 3, MaxDst} {
		s := Shape{M: 1 + rng.IntN(MaxSkinnyM), Hidden: 8 * 7 * (1 + rng.IntN(200)), Latent: 8 * (1 + rng.IntN(1000)), TP: 7}
		a := SkinnyArgs{Shape: s, Rank: 1 + rng.IntN(6), Latent: alignedPtr(rng), Weight: alignedPtr(rng), WeightPacked: true,
			Shared: alignedPtr(rng), SharedStride: s.Hidden + 8*rng.IntN(4)}
		for range ndst {
			a.Dst = append(a.Dst, alignedPtr(rng))
		}
		fused := ndst != 3 // one case without a fused receive
		if fused {
			a.Receive = &ReceiveArgs{M: s.M, Hidden: s.Hidden, Shard: s.Shard(), Slot: alignedPtr(rng), Out: alignedPtr(rng),
				Status: alignedPtr(rng) + 4, Timeout: time.Duration(1 + rng.Int64N(int64(10*time.Second))), Abortable: rng.IntN(2) == 1}
		}
		// With rotation (two cases of three), the fused receive's Out among
		// the destinations (its own slice straight into it): not a slot.
		rotated := ndst != 1
		outAt := -1
		if rotated {
			a.Rotation = SlotRotation{Counter: alignedPtr(rng) + 8, Slots: 2 + rng.IntN(100), Stride: 16 * (1 + rng.Uint64N(1<<20))}
			if fused {
				outAt = rng.IntN(ndst)
				a.Dst[outAt] = a.Receive.Out
				a.Receive.SkipSlice, a.Receive.SkipRank = true, a.Rank
				a.Rotation.Fixed = 1 << outAt
			}
		}
		p, err := skinnyParams(a)
		if err != nil {
			t.Fatalf("skinnyParams(%+v): %v", a, err)
		}
		p.TileRows = 32 // set by the launch from its config
		p.L2Prefetch = int32(rng.IntN(1 << 25))
		b := encodeSkinnyParams(&p)
		got := decodeFields(fields, b[:])
		dst := make([]uint64, MaxDst)
		for i, d := range a.Dst {
			dst[i] = uint64(d)
		}
		want := map[string][]uint64{
			"latent": {uint64(a.Latent)}, "weight": {uint64(a.Weight)}, "shared": {uint64(a.Shared)},
			"dst": dst, "latent_dim": {uint64(s.Latent)}, "shard": {uint64(s.Shard())},
			"hidden": {uint64(s.Hidden)}, "rank": {uint64(a.Rank)}, "shared_stride": {uint64(a.SharedStride)},
			"ndst": {uint64(ndst)}, "tile_rows": {32}, "l2_prefetch": {uint64(p.L2Prefetch)},
			"recv_slot": {0}, "recv_out": {0}, "recv_status": {0}, "recv_timeout_ns": {0}, "recv_flags": {0}, "flags": {SkinnyPacked},
			"rot_counter": {0}, "rot_stride": {0}, "rot_slots": {0}, "rot_dst_mask": {0},
		}
		if rotated {
			mask := uint64(1)<<ndst - 1
			if outAt >= 0 {
				mask &^= 1 << outAt
			}
			r := a.Rotation
			want["rot_counter"], want["rot_stride"], want["rot_slots"] = []uint64{uint64(r.Counter)}, []uint64{r.Stride}, []uint64{uint64(r.Slots)}
			want["rot_dst_mask"] = []uint64{mask}
		}
		if r := a.Receive; r != nil {
			flags := uint64(0)
			if r.Abortable {
				flags = ReceiveAbortable
			}
			want["recv_slot"], want["recv_out"], want["recv_status"] = []uint64{uint64(r.Slot)}, []uint64{uint64(r.Out)}, []uint64{uint64(r.Status)}
			if r.SkipSlice {
				flags |= ReceiveSkip | uint64(r.SkipRank)<<ReceiveSkipRankShift
			}
			want["recv_timeout_ns"], want["recv_flags"] = []uint64{uint64(r.Timeout)}, []uint64{flags}
		}
		for name, w := range want {
			if !slices.Equal(got[name], w) {
				t.Errorf("ndst %d: field %s decodes as %#x, want %#x", ndst, name, got[name], w)
			}
		}
		if len(got) != len(want) {
			t.Errorf("header fields %d, encoder knows %d: %v", len(got), len(want), fields)
		}
	}
}

func TestReceiveParamsMatchHeader(t *testing.T) {
	fields, size := parseParamsStruct(t, "tprun_receive_params")
	checkLayout(t, "tprun_receive_params", fields, size, ReceiveParamsSize)
	rng := testRand(t)
	a := ReceiveArgs{M: 1 + rng.IntN(MaxSkinnyM), Hidden: 8 * 4 * (1 + rng.IntN(500)), Slot: alignedPtr(rng),
		Out: alignedPtr(rng), Status: alignedPtr(rng) + 4, Timeout: time.Duration(1 + rng.Int64N(int64(10*time.Second)))}
	a.Shard = a.Hidden / 4
	a.Abortable = rng.IntN(2) == 1
	a.Rotation = SlotRotation{Counter: alignedPtr(rng) + 8, Slots: 2 + rng.IntN(100), Stride: 16 * (1 + rng.Uint64N(1<<20))}
	p, err := receiveParams(a)
	if err != nil {
		t.Fatalf("receiveParams(%+v): %v", a, err)
	}
	b := encodeReceiveParams(&p)
	got := decodeFields(fields, b[:])
	want := map[string][]uint64{
		"slot": {uint64(a.Slot)}, "out": {uint64(a.Out)}, "status": {uint64(a.Status)},
		"timeout_ns": {uint64(a.Timeout)}, "m": {uint64(a.M)}, "hidden": {uint64(a.Hidden)},
		"shard": {uint64(a.Shard)}, "flags": {uint64(p.Flags)},
		"rot_counter": {uint64(a.Rotation.Counter)}, "rot_stride": {a.Rotation.Stride}, "rot_slots": {uint64(a.Rotation.Slots)},
		"rot_reserved": {0},
	}
	for name, w := range want {
		if !slices.Equal(got[name], w) {
			t.Errorf("field %s decodes as %#x, want %#x", name, got[name], w)
		}
	}
	if wantFlags := map[bool]int32{false: 0, true: ReceiveAbortable}[a.Abortable]; p.Flags != wantFlags {
		t.Errorf("Abortable %v encodes flags %d, want %d", a.Abortable, p.Flags, wantFlags)
	}
	if len(got) != len(want) {
		t.Errorf("header fields %d, encoder knows %d: %v", len(got), len(want), fields)
	}
}

func goodSkinnyArgs() SkinnyArgs {
	return SkinnyArgs{Shape: Shape{M: 4, Hidden: 7168, Latent: 3584, TP: 8}, Rank: 3,
		Latent: 0x7f0000000000, Weight: 0x7f0000100000, WeightPacked: true, Shared: 0x7f0000200000 + 3*896*2, SharedStride: 7168,
		Dst: []cuda.DevicePtr{0x7f0000300000, 0x7f0000400000}}
}

// fusedReceive is a valid fused receive for shape s.
func fusedReceive(s Shape) *ReceiveArgs {
	return &ReceiveArgs{M: s.M, Hidden: s.Hidden, Shard: s.Shard(), Slot: 0x7f0000500000, Out: 0x7f0000600000,
		Status: 0x7f0000700000, Timeout: time.Second, Abortable: true}
}

func TestSkinnyParamsReject(t *testing.T) {
	tests := []struct {
		desc   string
		edit   func(*SkinnyArgs)
		target error
		inMsg  []string
	}{
		{"M above the op", func(a *SkinnyArgs) { a.Shape.M = MaxM + 1 }, ErrShape, []string{"M = 129", "1..128"}},
		{"hidden not divisible by tp", func(a *SkinnyArgs) { a.Shape.Hidden = 7164 }, ErrShape, []string{"hidden_dim % tp"}},
		{"rank out of range", func(a *SkinnyArgs) { a.Rank = 8 }, ErrArgs, []string{"Rank = 8", "0..7"}},
		{"negative rank", func(a *SkinnyArgs) { a.Rank = -1 }, ErrArgs, []string{"Rank = -1"}},
		{"shared stride below shard", func(a *SkinnyArgs) { a.SharedStride = 888 }, ErrArgs, []string{"SharedStride = 888"}},
		{"shared stride unaligned", func(a *SkinnyArgs) { a.SharedStride = 7172 }, ErrArgs, []string{"SharedStride = 7172", "multiple of 8"}},
		{"latent misaligned", func(a *SkinnyArgs) { a.Latent += 8 }, ErrArgs, []string{"Latent = 0x7f0000000008", "16-byte"}},
		{"null weight", func(a *SkinnyArgs) { a.Weight = 0 }, ErrArgs, []string{"Weight = 0x0"}},
		{"row-major weight", func(a *SkinnyArgs) { a.WeightPacked = false }, ErrArgs, []string{"WeightPacked = false", "PackWeight"}},
		{"shared misaligned", func(a *SkinnyArgs) { a.Shared += 2 }, ErrArgs, []string{"Shared = 0x7f0000201502"}},
		{"no destination", func(a *SkinnyArgs) { a.Dst = nil }, ErrArgs, []string{"len(Dst) = 0"}},
		{"17 destinations", func(a *SkinnyArgs) { a.Dst = make([]cuda.DevicePtr, 17) }, ErrArgs, []string{"len(Dst) = 17", "1..16"}},
		{"second destination misaligned", func(a *SkinnyArgs) { a.Dst[1] += 4 }, ErrArgs, []string{"Dst[1] = 0x7f0000400004"}},
		{"fused receive of another M", func(a *SkinnyArgs) { a.Receive = fusedReceive(a.Shape); a.Receive.M = 3 },
			ErrArgs, []string{"Receive = M=3", "must match the shape"}},
		{"fused receive slot misaligned", func(a *SkinnyArgs) { a.Receive = fusedReceive(a.Shape); a.Receive.Slot += 8 },
			ErrArgs, []string{"fused receive", "Slot = 0x7f0000500008"}},
		{"fused receive without timeout", func(a *SkinnyArgs) { a.Receive = fusedReceive(a.Shape); a.Receive.Timeout = 0 },
			ErrArgs, []string{"fused receive", "Timeout = 0s"}},
		{"fused receive skipping another rank", func(a *SkinnyArgs) {
			a.Receive = fusedReceive(a.Shape)
			a.Receive.SkipSlice, a.Receive.SkipRank = true, a.Rank+1
			a.Dst = append(a.Dst, a.Receive.Out)
		}, ErrArgs, []string{"Receive.SkipRank", "own rank"}},
		{"rotation counter misaligned", func(a *SkinnyArgs) { a.Rotation = goodRotation(); a.Rotation.Counter += 4 },
			ErrArgs, []string{"Rotation.Counter = 0x7f0000800004", "8-byte"}},
		{"rotation of one slot", func(a *SkinnyArgs) { a.Rotation = goodRotation(); a.Rotation.Slots = 1 },
			ErrArgs, []string{"Rotation.Slots = 1"}},
		{"rotation stride unaligned", func(a *SkinnyArgs) { a.Rotation = goodRotation(); a.Rotation.Stride = 7176 },
			ErrArgs, []string{"Rotation.Stride = 7176", "multiple of 16"}},
		{"rotation stride zero", func(a *SkinnyArgs) { a.Rotation = goodRotation(); a.Rotation.Stride = 0 },
			ErrArgs, []string{"Rotation.Stride = 0"}},
		{"rotation past the address space", func(a *SkinnyArgs) { a.Rotation = goodRotation(); a.Rotation.Stride = 1 << 63 },
			ErrArgs, []string{"Rotation.Stride", "overflows"}},
		{"rotation marking no destination", func(a *SkinnyArgs) { a.Rotation = goodRotation(); a.Rotation.Fixed = 1 << len(a.Dst) },
			ErrArgs, []string{"Rotation.Fixed = 0x4", "past the 2 of Dst"}},
		{"rotation of the fused receive's output", func(a *SkinnyArgs) {
			a.Rotation = goodRotation()
			a.Receive = fusedReceive(a.Shape)
			a.Receive.SkipSlice, a.Receive.SkipRank = true, a.Rank
			a.Dst = append(a.Dst, a.Receive.Out)
		}, ErrArgs, []string{"Rotation.Fixed = 0x0", "must mark Dst[2]"}},
		{"fused receive with its own rotation", func(a *SkinnyArgs) {
			a.Rotation = goodRotation()
			a.Receive = fusedReceive(a.Shape)
			a.Receive.Rotation = goodRotation()
			a.Receive.Rotation.Counter += 8
		}, ErrArgs, []string{"Receive.Rotation", "zero or the launch's"}},
		{"fused receive skipping into an output the tiles do not write", func(a *SkinnyArgs) {
			a.Receive = fusedReceive(a.Shape)
			a.Receive.SkipSlice, a.Receive.SkipRank = true, a.Rank
		}, ErrArgs, []string{"Receive.Out = 0x7f0000600000", "one of Dst"}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			a := goodSkinnyArgs()
			tc.edit(&a)
			_, err := skinnyParams(a)
			if !errors.Is(err, tc.target) {
				t.Fatalf("skinnyParams: %v, want an error wrapping %v", err, tc.target)
			}
			for _, s := range tc.inMsg {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
	t.Run("every violation reported", func(t *testing.T) {
		a := goodSkinnyArgs()
		a.Rank, a.Latent, a.Dst[0] = 9, 3, 5
		_, err := skinnyParams(a)
		for _, s := range []string{"Rank = 9", "Latent = 0x3", "Dst[0] = 0x5"} {
			if err == nil || !strings.Contains(err.Error(), s) {
				t.Errorf("error %v does not mention %q", err, s)
			}
		}
	})
}

func goodRotation() SlotRotation {
	return SlotRotation{Counter: 0x7f0000800000, Slots: 3, Stride: 7168 * 8 * 2}
}

func goodReceiveArgs() ReceiveArgs {
	return ReceiveArgs{M: 8, Hidden: 7168, Shard: 896, Slot: 0x7f0000000000, Out: 0x7f0000100000, Status: 0x7f0000200004, Timeout: time.Second}
}

func TestReceiveParamsReject(t *testing.T) {
	tests := []struct {
		desc  string
		edit  func(*ReceiveArgs)
		inMsg string
	}{
		{"zero rows", func(a *ReceiveArgs) { a.M = 0 }, "M = 0"},
		{"too many rows", func(a *ReceiveArgs) { a.M = MaxM + 1 }, "M = 129"},
		{"hidden unaligned", func(a *ReceiveArgs) { a.Hidden = 7164 }, "Hidden = 7164"},
		{"shard unaligned", func(a *ReceiveArgs) { a.Shard = 892 }, "Shard = 892"},
		{"shard not dividing hidden", func(a *ReceiveArgs) { a.Shard = 1000 }, "must divide Hidden"},
		{"more than 16 ranks", func(a *ReceiveArgs) { a.Shard = 224 }, "32 ranks"},
		{"no timeout", func(a *ReceiveArgs) { a.Timeout = 0 }, "Timeout = 0s"},
		{"slot misaligned", func(a *ReceiveArgs) { a.Slot += 8 }, "Slot = 0x7f0000000008"},
		{"null out", func(a *ReceiveArgs) { a.Out = 0 }, "Out = 0x0"},
		{"status misaligned", func(a *ReceiveArgs) { a.Status += 2 }, "Status = 0x7f0000200006"},
		{"skip past the last rank", func(a *ReceiveArgs) { a.SkipSlice, a.SkipRank = true, 8 }, "SkipRank = 8"},
		{"skip a negative rank", func(a *ReceiveArgs) { a.SkipSlice, a.SkipRank = true, -1 }, "SkipRank = -1"},
		{"rotation counter misaligned", func(a *ReceiveArgs) { a.Rotation = goodRotation(); a.Rotation.Counter++ }, "Rotation.Counter"},
		{"rotation of no slots", func(a *ReceiveArgs) { a.Rotation = goodRotation(); a.Rotation.Slots = 0 }, "Rotation.Slots = 0"},
		{"rotation stride unaligned", func(a *ReceiveArgs) { a.Rotation = goodRotation(); a.Rotation.Stride = 8 }, "Rotation.Stride = 8"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			a := goodReceiveArgs()
			tc.edit(&a)
			_, err := receiveParams(a)
			if !errors.Is(err, ErrArgs) || !strings.Contains(err.Error(), tc.inMsg) {
				t.Fatalf("receiveParams: %v, want ErrArgs mentioning %q", err, tc.inMsg)
			}
		})
	}
}

func TestDecodeReceiveStatus(t *testing.T) {
	tests := []struct {
		desc     string
		set      []int // word indexes set to 1
		timedOut bool
		missing  []int
	}{
		{"all arrived", nil, false, nil},
		{"rank 0 missing", []int{0, 1}, true, []int{0}},
		{"ranks 3 and 15 missing", []int{0, 4, 16}, true, []int{3, 15}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			var w [ReceiveStatusWords]uint32
			for _, i := range tc.set {
				w[i] = 1
			}
			timedOut, missing := DecodeReceiveStatus(w)
			if timedOut != tc.timedOut || !slices.Equal(missing, tc.missing) {
				t.Errorf("DecodeReceiveStatus = %v, %v; want %v, %v", timedOut, missing, tc.timedOut, tc.missing)
			}
		})
	}
}

// fakeDriver records what Kernels asks of the driver.
type fakeDriver struct {
	image    []byte
	funcs    map[string]cuda.Function
	unloaded []cuda.Module
	launches []fakeLaunch
	fail     error      // returned by LaunchKernelEx when set
	shared   funcShared // max dynamic shared memory set by FuncSetAttribute
}

type fakeLaunch struct {
	cfg    cuda.LaunchConfig
	f      cuda.Function
	params [][]byte
}

const fakeModule cuda.Module = 0xa0d

// mustSkinnyFunctions is the names of skinnyEntryPoints for the tests: the
// embedded spec parses (TestFamilies).
func mustSkinnyFunctions() []string {
	eps, err := skinnyEntryPoints()
	if err != nil {
		panic(err)
	}
	names := make([]string, len(eps))
	for i, ep := range eps {
		names[i] = ep.name
	}
	return names
}

func newFakeDriver(missing string) *fakeDriver {
	d := &fakeDriver{funcs: map[string]cuda.Function{}}
	for i, name := range mustSkinnyFunctions() {
		d.funcs[name] = cuda.Function(0xf00 + i)
	}
	d.funcs[receiveName] = 0xfee
	d.funcs[receiveName+rotSuffix] = 0xfef
	delete(d.funcs, missing)
	return d
}

func (d *fakeDriver) ModuleLoadData(image []byte) (cuda.Module, error) {
	d.image = image
	return fakeModule, nil
}

func (d *fakeDriver) ModuleUnload(m cuda.Module) error {
	d.unloaded = append(d.unloaded, m)
	return nil
}

func (d *fakeDriver) ModuleGetFunction(m cuda.Module, name string) (cuda.Function, error) {
	if f, ok := d.funcs[name]; ok && m == fakeModule {
		return f, nil
	}
	return 0, cuda.ErrNotFound
}

func (d *fakeDriver) FuncSetAttribute(f cuda.Function, attr cuda.FuncAttribute, v int) error {
	return d.shared.set(f, attr, v)
}

// funcShared is, per function, the max dynamic shared memory a fake
// driver's FuncSetAttribute allowed it.
type funcShared map[cuda.Function]int

// set records v for f, or refuses what the driver refuses.
func (s *funcShared) set(f cuda.Function, attr cuda.FuncAttribute, v int) error {
	if attr != cuda.FuncAttrMaxDynamicSharedSizeBytes || v < 0 || v > MaxSharedOptIn {
		return cuda.ErrInvalidValue
	}
	if *s == nil {
		*s = funcShared{}
	}
	(*s)[f] = v
	return nil
}

// allows is the most dynamic shared memory a launch of f may take.
func (s funcShared) allows(f cuda.Function) int { return max(DefaultSharedLimit, s[f]) }

func (d *fakeDriver) LaunchKernelEx(cfg cuda.LaunchConfig, f cuda.Function, params ...[]byte) error {
	if d.fail != nil {
		return d.fail
	}
	if int(cfg.SharedMem) > d.shared.allows(f) {
		return fmt.Errorf("fake: %d bytes of dynamic shared memory, the function allows %d: %w", cfg.SharedMem, d.shared.allows(f), cuda.ErrInvalidValue)
	}
	var cp [][]byte
	for _, p := range params {
		cp = append(cp, slices.Clone(p))
	}
	d.launches = append(d.launches, fakeLaunch{cfg, f, cp})
	return nil
}

func TestLoadNamesMissingEntryPoint(t *testing.T) {
	all := mustSkinnyFunctions()
	for _, missing := range []string{all[0], all[len(all)-1], receiveName, receiveName + rotSuffix} {
		t.Run(missing, func(t *testing.T) {
			d := newFakeDriver(missing)
			k, err := Load(d)
			if err == nil || !strings.Contains(err.Error(), missing) || !errors.Is(err, cuda.ErrNotFound) {
				t.Fatalf("Load = %v, %v; want an error naming %s and wrapping the driver's", k, err, missing)
			}
			if !slices.Equal(d.unloaded, []cuda.Module{fakeModule}) {
				t.Errorf("module unloads after the failed load: %v", d.unloaded)
			}
		})
	}
}

func TestLoadAndClose(t *testing.T) {
	d := newFakeDriver("")
	k, err := Load(d)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(d.image) == 0 || len(d.image) != len(Fatbin()) {
		t.Errorf("ModuleLoadData got %d bytes, the embedded fatbin has %d", len(d.image), len(Fatbin()))
	}
	if n := len(k.skinny); n != len(mustSkinnyFunctions()) || n < MaxSkinnyM {
		t.Errorf("%d skinny functions looked up, want every entry point (%d)", n, len(mustSkinnyFunctions()))
	}
	for i := range 2 {
		if err := k.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	if len(d.unloaded) != 1 {
		t.Errorf("module unloaded %d times, want once", len(d.unloaded))
	}
	err = k.LaunchSkinny(0, goodSkinnyArgs(), false)
	if !errors.Is(err, ErrClosed) {
		t.Errorf("LaunchSkinny after Close: %v, want ErrClosed", err)
	}
	if len(d.launches) != 0 {
		t.Errorf("launched after Close")
	}
}

func TestLaunchSkinnyConfig(t *testing.T) {
	for _, pdl := range []bool{false, true} {
		for _, m := range []int{1, 5, 8} {
			{
				t.Run(fmt.Sprintf("M%d/pdl=%v", m, pdl), func(t *testing.T) {
					d := newFakeDriver("")
					k, err := Load(d)
					if err != nil {
						t.Fatal(err)
					}
					a := goodSkinnyArgs()
					a.Shape.M = m
					const stream cuda.Stream = 0x5157
					if err := k.LaunchSkinny(stream, a, pdl); err != nil {
						t.Fatalf("LaunchSkinny: %v", err)
					}
					c := ConfigFor(m, a.Shape.Shard(), a.Shape.Latent)
					if len(d.launches) != 1 {
						t.Fatalf("%d launches", len(d.launches))
					}
					l := d.launches[0]
					want := cuda.LaunchConfig{
						Grid: [3]uint32{uint32(c.GridX), 1, 1}, Block: [3]uint32{uint32(c.BlockX), 1, 1},
						SharedMem: uint32(c.SharedBytes), Stream: stream, ProgrammaticSerialization: pdl,
						ClusterDim: [3]uint32{uint32(c.Cluster), 1, 1}, ClusterPolicy: cuda.ClusterSchedulingPolicy(c.ClusterPolicy),
					}
					if c.Carveout > 0 {
						want.SharedCarveout = cuda.Carveout(c.Carveout)
					}
					if l.cfg != want {
						t.Errorf("launch config %+v, want %+v (from %+v)", l.cfg, want, c)
					}
					if l.f != d.funcs[c.Function] {
						t.Errorf("launched function %#x, want %s", l.f, c.Function)
					}
					if len(l.params) != 1 || len(l.params[0]) != SkinnyParamsSize {
						t.Fatalf("params %d blocks, want one of %d bytes", len(l.params), SkinnyParamsSize)
					}
					p := l.params[0]
					if tr := binary.LittleEndian.Uint32(p[176:]); int(tr) != c.TileRows {
						t.Errorf("tile_rows %d, config says %d", tr, c.TileRows)
					}
					if f := binary.LittleEndian.Uint32(p[220:]); f != SkinnyPacked {
						t.Errorf("flags %#x, want %#x", f, SkinnyPacked)
					}
					if r := binary.LittleEndian.Uint32(p[164:]); r != 3 {
						t.Errorf("rank %d, want 3", r)
					}
				})
			}
		}
	}
}

func TestLaunchSkinnyRejectsBeforeLaunching(t *testing.T) {
	d := newFakeDriver("")
	k, err := Load(d)
	if err != nil {
		t.Fatal(err)
	}
	a := goodSkinnyArgs()
	a.Dst[0]++
	err = k.LaunchSkinny(0, a, true)
	if !errors.Is(err, ErrArgs) || !strings.Contains(err.Error(), "rank 3") {
		t.Errorf("LaunchSkinny with a misaligned destination: %v", err)
	}
	if len(d.launches) != 0 {
		t.Errorf("launched despite the bad argument")
	}
	d.fail = cuda.ErrLaunchFailed
	if err := k.LaunchSkinny(0, goodSkinnyArgs(), true); !errors.Is(err, cuda.ErrLaunchFailed) {
		t.Errorf("driver failure not wrapped: %v", err)
	}
}

func TestLaunchReceiveConfig(t *testing.T) {
	tests := []struct {
		desc      string
		m, hidden int
	}{
		{"one row, one CTA", 1, 64},
		{"reference shape", 8, 7168},
		{"capped at one wave", 8, 1 << 20},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			d := newFakeDriver("")
			k, err := Load(d)
			if err != nil {
				t.Fatal(err)
			}
			a := goodReceiveArgs()
			a.M, a.Hidden, a.Shard = tc.m, tc.hidden, tc.hidden
			if err := k.LaunchReceive(7, a, true); err != nil {
				t.Fatalf("LaunchReceive: %v", err)
			}
			c := ReceiveConfigFor(tc.m, tc.hidden)
			l := d.launches[0]
			want := cuda.LaunchConfig{Grid: [3]uint32{uint32(c.GridX), 1, 1}, Block: [3]uint32{uint32(c.BlockX), 1, 1}, Stream: 7, ProgrammaticSerialization: true}
			if l.cfg != want || l.f != d.funcs[receiveName] || len(l.params) != 1 || len(l.params[0]) != ReceiveParamsSize {
				t.Errorf("launch %+v of %#x with %d params, want %+v of %s with one %d-byte block", l.cfg, l.f, len(l.params), want, receiveName, ReceiveParamsSize)
			}
		})
	}
}

// ---- An emulated device, to run the GPU tests' harness on the CPU.
//
// emuDevice keeps "device memory" in Go slices at made-up addresses and
// runs launches with the CPU kernel (skinny) and a Go Lamport receive,
// decoding the parameter blocks at skinny.h's offsets and checking every
// launch against the kernels' launch rules. Stream work runs at once, or
// is recorded while a capture is open and replayed by GraphLaunch. It
// exists so that the harness in gpu_test.go is itself tested.
type emuDevice struct {
	allocs    map[cuda.DevicePtr][]byte
	next      cuda.DevicePtr
	funcs     map[cuda.Function]string
	capturing bool
	captured  []func() error
	graphs    map[cuda.Graph][]func() error
	execs     map[cuda.GraphExec][]func() error
	nextID    uintptr
	launches  map[string]int // per entry point; "pdl" and "cluster>1" count attributes
	// bug, when set, makes the emulated kernels misbehave in one way, to
	// show that the harness notices (TestHarnessCatchesBugs).
	bug string
	// afterKernel: the last work queued was a kernel (what PDL overlaps).
	afterKernel bool
	shared      funcShared // max dynamic shared memory set by FuncSetAttribute
}

var _ device = (*emuDevice)(nil)

func newEmuDevice() *emuDevice {
	return &emuDevice{allocs: map[cuda.DevicePtr][]byte{}, next: 1 << 32, funcs: map[cuda.Function]string{},
		graphs: map[cuda.Graph][]func() error{}, execs: map[cuda.GraphExec][]func() error{}, launches: map[string]int{}}
}

func (d *emuDevice) id() uintptr { d.nextID++; return d.nextID }

// mem is the n bytes at p, which must lie inside one allocation.
func (d *emuDevice) mem(p cuda.DevicePtr, n int) ([]byte, error) {
	for base, b := range d.allocs {
		if p >= base && p < base+cuda.DevicePtr(len(b)) {
			off := int(p - base)
			if off+n > len(b) {
				return nil, fmt.Errorf("emu: %d bytes at %#x run %d bytes past the end of the allocation at %#x", n, uint64(p), off+n-len(b), uint64(base))
			}
			return b[off : off+n], nil
		}
	}
	return nil, fmt.Errorf("emu: %#x is not device memory", uint64(p))
}

func (d *emuDevice) bf16s(p cuda.DevicePtr, n int) ([]BF16, error) {
	b, err := d.mem(p, 2*n)
	if err != nil || n == 0 {
		return nil, err
	}
	return unsafe.Slice((*BF16)(unsafe.Pointer(&b[0])), n), nil
}

func (d *emuDevice) words(p cuda.DevicePtr, n int) ([]uint32, error) {
	b, err := d.mem(p, 4*n)
	if err != nil || n == 0 {
		return nil, err
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&b[0])), n), nil
}

// enqueue runs op now, or records it while capturing.
func (d *emuDevice) enqueue(op func() error) error {
	if d.capturing {
		d.captured = append(d.captured, op)
		return nil
	}
	return op()
}

func (d *emuDevice) notCapturing(op string) error {
	if d.capturing {
		return fmt.Errorf("emu: %s during stream capture: %w", op, cuda.ErrStreamCaptureUnsupported)
	}
	return nil
}

func (d *emuDevice) ModuleLoadData(image []byte) (cuda.Module, error) {
	if len(image) == 0 {
		return 0, cuda.ErrInvalidImage
	}
	for _, name := range mustSkinnyFunctions() {
		d.funcs[cuda.Function(d.id())] = name
	}
	d.funcs[cuda.Function(d.id())] = receiveName
	d.funcs[cuda.Function(d.id())] = receiveName + rotSuffix
	return cuda.Module(d.id()), nil
}

func (d *emuDevice) ModuleUnload(cuda.Module) error { return nil }

func (d *emuDevice) ModuleGetFunction(_ cuda.Module, name string) (cuda.Function, error) {
	for f, n := range d.funcs {
		if n == name {
			return f, nil
		}
	}
	return 0, cuda.ErrNotFound
}

func (d *emuDevice) MemAlloc(size uint64) (cuda.DevicePtr, error) {
	p := d.next
	d.allocs[p] = make([]byte, size)
	// A gap between allocations, so an overrun is not another buffer.
	d.next += cuda.DevicePtr((size+255)&^255) + 1<<20
	return p, nil
}

func (d *emuDevice) MemFree(p cuda.DevicePtr) error {
	if _, ok := d.allocs[p]; !ok {
		return fmt.Errorf("emu: MemFree(%#x): not an allocation", uint64(p))
	}
	delete(d.allocs, p)
	return nil
}

func (d *emuDevice) MemcpyHtoD(dst cuda.DevicePtr, src []byte) error {
	if err := d.notCapturing("MemcpyHtoD"); err != nil {
		return err
	}
	b, err := d.mem(dst, len(src))
	if err != nil {
		return err
	}
	copy(b, src)
	return nil
}

func (d *emuDevice) MemcpyDtoH(dst []byte, src cuda.DevicePtr) error {
	if err := d.notCapturing("MemcpyDtoH"); err != nil {
		return err
	}
	b, err := d.mem(src, len(dst))
	if err != nil {
		return err
	}
	copy(dst, b)
	return nil
}

func (d *emuDevice) MemsetD32Async(p cuda.DevicePtr, v uint32, n uint64, _ cuda.Stream) error {
	d.afterKernel = false
	return d.enqueue(func() error {
		w, err := d.words(p, int(n))
		for i := range w {
			w[i] = v
		}
		return err
	})
}

func (d *emuDevice) StreamCreate(cuda.StreamFlags) (cuda.Stream, error) {
	return cuda.Stream(d.id()), nil
}
func (d *emuDevice) StreamDestroy(cuda.Stream) error { return nil }
func (d *emuDevice) StreamSynchronize(cuda.Stream) error {
	return d.notCapturing("StreamSynchronize")
}

func (d *emuDevice) CtxSynchronize() error { return d.notCapturing("CtxSynchronize") }

func (d *emuDevice) StreamBeginCapture(cuda.Stream, cuda.CaptureMode) error {
	if err := d.notCapturing("StreamBeginCapture"); err != nil {
		return err
	}
	d.capturing, d.captured = true, nil
	return nil
}

func (d *emuDevice) StreamEndCapture(cuda.Stream) (cuda.Graph, error) {
	if !d.capturing {
		return 0, fmt.Errorf("emu: StreamEndCapture without a capture: %w", cuda.ErrIllegalState)
	}
	g := cuda.Graph(d.id())
	d.graphs[g], d.capturing = d.captured, false
	return g, nil
}

func (d *emuDevice) GraphInstantiate(g cuda.Graph, _ cuda.GraphInstantiateFlags) (cuda.GraphExec, error) {
	ops, ok := d.graphs[g]
	if !ok {
		return 0, cuda.ErrInvalidValue
	}
	x := cuda.GraphExec(d.id())
	d.execs[x] = ops
	return x, nil
}

func (d *emuDevice) GraphUpload(cuda.GraphExec, cuda.Stream) error { return nil }

func (d *emuDevice) GraphLaunch(x cuda.GraphExec, _ cuda.Stream) error {
	ops, ok := d.execs[x]
	if !ok {
		return cuda.ErrInvalidValue
	}
	return d.enqueue(func() error {
		for _, op := range ops {
			if err := op(); err != nil {
				return err
			}
		}
		return nil
	})
}

func (d *emuDevice) GraphExecDestroy(x cuda.GraphExec) error { delete(d.execs, x); return nil }
func (d *emuDevice) GraphDestroy(g cuda.Graph) error         { delete(d.graphs, g); return nil }

func (d *emuDevice) FuncSetAttribute(f cuda.Function, attr cuda.FuncAttribute, v int) error {
	if _, ok := d.funcs[f]; !ok {
		return cuda.ErrInvalidValue
	}
	return d.shared.set(f, attr, v)
}

func (d *emuDevice) LaunchKernelEx(cfg cuda.LaunchConfig, f cuda.Function, params ...[]byte) error {
	name, ok := d.funcs[f]
	if !ok {
		return fmt.Errorf("emu: launch of unknown function %#x: %w", uintptr(f), cuda.ErrInvalidHandle)
	}
	if int(cfg.SharedMem) > d.shared.allows(f) {
		return fmt.Errorf("emu: %s with %d bytes of dynamic shared memory, the function allows %d: %w", name, cfg.SharedMem, d.shared.allows(f), cuda.ErrInvalidValue)
	}
	if len(params) != 1 {
		return fmt.Errorf("emu: %s takes one parameter block, got %d", name, len(params))
	}
	p := slices.Clone(params[0])
	d.launches[name]++
	if cfg.ProgrammaticSerialization {
		d.launches["pdl"]++
	}
	if cfg.ClusterDim[0] > 1 {
		d.launches["cluster>1"]++
	}
	// The entry point with slot rotation for a launch with a counter, and
	// only for one.
	base, rot := strings.CutSuffix(name, rotSuffix)
	if counterAt := map[bool]int{true: 48, false: 224}[base == receiveName]; len(p) >= counterAt+8 &&
		rot != (binary.LittleEndian.Uint64(p[counterAt:]) != 0) {
		return fmt.Errorf("emu: %s launched with rotation counter %#x", name, binary.LittleEndian.Uint64(p[counterAt:]))
	}
	if rot {
		d.launches["rotation"]++
	}
	name = base
	if name == receiveName {
		if len(p) != ReceiveParamsSize || cfg.Block[0]%32 != 0 || cfg.Block[0] > 1024 || cfg.Grid[0] < 1 {
			return fmt.Errorf("emu: receive launch %+v with %d parameter bytes: %w", cfg, len(p), cuda.ErrInvalidValue)
		}
		d.afterKernel = true
		return d.enqueue(func() error { return d.runReceive(p) })
	}
	if len(p) != SkinnyParamsSize {
		return fmt.Errorf("emu: %s with %d parameter bytes", name, len(p))
	}
	le := binary.LittleEndian
	if mt, ok := bigmMT(name); ok {
		return d.launchBigm(cfg, name, mt, p)
	}
	m, ok := skinnyM(name)
	if !ok {
		return fmt.Errorf("emu: %s is not a skinny entry point", name)
	}
	K, shard, tile := int(le.Uint32(p[152:])), int(le.Uint32(p[156:])), int(le.Uint32(p[176:]))
	warps, cluster := int(cfg.Block[0])/32, int(cfg.ClusterDim[0])
	if pf := int(le.Uint32(p[180:])); pf != 0 {
		// A hint the emulator ignores; the launch must carry a valid one.
		if !validPrefetch(pf) {
			return fmt.Errorf("emu: %s with L2 prefetch plan %#x", name, pf)
		}
		d.launches["l2 prefetch"]++
	}
	// The launch must be what the table picks for the shape (the kernel
	// traps on a tile_rows that is not its family's or without the packed
	// flag), and within the limits of skinny.h.
	if flags := le.Uint32(p[220:]); flags != SkinnyPacked {
		return fmt.Errorf("emu: %s with flags %#x", name, flags)
	}
	configFor := ConfigFor
	if le.Uint64(p[184:]) != 0 {
		configFor = StepConfigFor
	}
	c := configFor(m, shard, K)
	recvCTAs := 0 // the receive CTAs of a fused receive (skinny.h)
	if le.Uint64(p[184:]) != 0 {
		polled := int(le.Uint32(p[160:])) // hidden, less the skipped rank's columns
		if le.Uint32(p[216:])&ReceiveSkip != 0 {
			polled -= shard
		}
		recvCTAs = ReceiveCTAs(m, polled, int(cfg.Block[0]), cluster)
	}
	switch {
	case c.Function != name || c.TileRows != tile || c.Warps != warps || c.Cluster != cluster ||
		c.GridX+recvCTAs != int(cfg.Grid[0]) || c.SharedBytes != int(cfg.SharedMem) || c.L2Prefetch != int(le.Uint32(p[180:])):
		return fmt.Errorf("emu: %s launch %+v with tile_rows %d, but ConfigFor(%d, %d, %d) = %+v", name, cfg, tile, m, shard, K, c)
	case tile != 16 && tile != 32, warps < 1 || warps > 16, cfg.Block[0]%32 != 0, cluster < 1 || cluster > MaxCluster,
		int(cfg.Grid[0]) != (shard+tile-1)/tile*cluster+recvCTAs, recvCTAs%cluster != 0:
		return fmt.Errorf("emu: %s launch %+v breaks skinny.h's launch rules (tile_rows %d, shard %d, latent %d)", name, cfg, tile, shard, K)
	}
	d.launches[fmt.Sprintf("M=%d", m)]++
	early := cfg.ProgrammaticSerialization && d.afterKernel && d.bug == "PDL reads latent early"
	d.afterKernel = true
	var recv []byte // the fused receive as a tprun_receive_params block
	if le.Uint64(p[184:]) != 0 {
		d.launches["fused receive"]++
		recv = make([]byte, ReceiveParamsSize)
		copy(recv[0:32], p[184:216]) // slot, out, status, timeout_ns
		le.PutUint32(recv[32:], uint32(m))
		copy(recv[36:40], p[160:164]) // hidden
		copy(recv[40:44], p[156:160]) // shard
		copy(recv[44:48], p[216:220]) // flags
		copy(recv[48:68], p[224:244]) // rot_counter, rot_stride, rot_slots: the receive ends the step
	}
	return d.enqueue(func() error {
		if err := d.runSkinny(m, p, early); err != nil || recv == nil {
			return err
		}
		return d.runReceive(recv)
	})
}

// launchBigm checks a launch of the larger-M entry point name (code size
// mt) against skinny.h's rules and BigmConfigFor's pick, and queues it: the
// same computation as the skinny kernel's, for the M in its flags.
func (d *emuDevice) launchBigm(cfg cuda.LaunchConfig, name string, mt int, p []byte) error {
	le := binary.LittleEndian
	K, shard, tile := int(le.Uint32(p[152:])), int(le.Uint32(p[156:])), int(le.Uint32(p[176:]))
	flags := le.Uint32(p[220:])
	m := int(flags>>SkinnyRowsShift) & 0xff
	if flags&^(0xff<<SkinnyRowsShift) != SkinnyPacked || m <= MaxSkinnyM || m > mt {
		return fmt.Errorf("emu: %s with flags %#x (M %d)", name, flags, m)
	}
	if le.Uint64(p[184:]) != 0 {
		return fmt.Errorf("emu: %s with a fused receive (the kernel traps)", name)
	}
	c := ConfigFor(m, shard, K)
	warps, cluster := int(cfg.Block[0])/32, int(cfg.ClusterDim[0])
	switch {
	case c.Function != name || c.TileRows != tile || c.Warps != warps || c.Cluster != cluster || c.CodeM != mt ||
		c.GridX != int(cfg.Grid[0]) || c.SharedBytes != int(cfg.SharedMem) || c.L2Prefetch != int(le.Uint32(p[180:])):
		return fmt.Errorf("emu: %s launch %+v with tile_rows %d, but ConfigFor(%d, %d, %d) = %+v", name, cfg, tile, m, shard, K, c)
	case tile%32 != 0, warps < 1 || warps > 8, warps%(tile/32) != 0, cluster < 1 || cluster > MaxCluster,
		int(cfg.Grid[0]) != (shard+tile-1)/tile*cluster:
		return fmt.Errorf("emu: %s launch %+v breaks skinny.h's launch rules (tile_rows %d, shard %d, latent %d)", name, cfg, tile, shard, K)
	}
	if cluster > 1 {
		d.launches["cluster>1"]++
	}
	d.launches[fmt.Sprintf("M=%d", m)]++
	d.launches["bigm"]++
	early := cfg.ProgrammaticSerialization && d.afterKernel && d.bug == "PDL reads latent early"
	d.afterKernel = true
	return d.enqueue(func() error { return d.runSkinny(m, p, early) })
}

// bigmMT is the code size of a larger-M entry point's name (without the
// rotation suffix).
func bigmMT(name string) (int, bool) {
	if !strings.HasPrefix(name, "tprun_bigm_mt") || strings.HasSuffix(name, rotSuffix) || !slices.Contains(mustSkinnyFunctions(), name) {
		return 0, false
	}
	rest, _, _ := strings.Cut(strings.TrimPrefix(name, "tprun_bigm_mt"), "_")
	mt, err := strconv.Atoi(rest)
	return mt, err == nil
}

// runSkinny is the skinny kernel on the CPU, reading its parameters the
// way skinny.h lays them out, and the packed weight the way the kernel's
// lanes read it (unpackWeight).
func (d *emuDevice) runSkinny(M int, p []byte, early bool) error {
	le := binary.LittleEndian
	i32 := func(off int) int { return int(int32(le.Uint32(p[off:]))) }
	K, shard, hidden, rank, stride, ndst := i32(152), i32(156), i32(160), i32(164), i32(168), i32(172)
	for _, off := range []int{0, 8, 16} {
		if le.Uint64(p[off:])%16 != 0 {
			return fmt.Errorf("emu: skinny pointer at offset %d misaligned", off)
		}
	}
	if ndst < 1 || ndst > MaxDst || hidden%shard != 0 {
		return fmt.Errorf("emu: skinny ndst %d hidden %d shard %d", ndst, hidden, shard)
	}
	s := Shape{M: M, Hidden: hidden, Latent: K, TP: hidden / shard}
	lat, err1 := d.bf16s(cuda.DevicePtr(le.Uint64(p[0:])), M*K)
	w, err2 := d.bf16s(cuda.DevicePtr(le.Uint64(p[8:])), PackedWeightLen(shard, K))
	sh, err3 := d.bf16s(cuda.DevicePtr(le.Uint64(p[16:])), (M-1)*stride+shard)
	if err := errors.Join(err1, err2, err3); err != nil {
		return fmt.Errorf("emu: skinny operands: %w", err)
	}
	w = unpackWeight(w, shard, K)
	if early {
		// What a kernel reading before griddepcontrol.wait could see.
		lat = slices.Repeat([]BF16{poison}, len(lat))
	}
	if d.bug == "ignores destinations after the first" {
		ndst = 1
	}
	// Slot rotation: the slot the counter names, read and not advanced
	// (the receive of the step advances it, fused or not).
	var rot uint64
	if counter := cuda.DevicePtr(le.Uint64(p[224:])); counter != 0 {
		s, _, err := d.rotation(counter, le.Uint64(p[232:]), i32(240))
		if err != nil {
			return err
		}
		rot = s
		if d.bug == "skinny uses slot 0" {
			rot = 0
		}
	}
	mask := uint32(i32(244))
	for i := range ndst {
		dp := cuda.DevicePtr(le.Uint64(p[24+8*i:]))
		if mask>>i&1 != 0 || d.bug == "skinny rotates every destination" {
			dp += cuda.DevicePtr(rot)
		}
		if dp%16 != 0 {
			return fmt.Errorf("emu: skinny dst[%d] misaligned", i)
		}
		out, err := d.bf16s(dp, M*hidden)
		if err != nil {
			return fmt.Errorf("emu: skinny dst[%d]: %w", i, err)
		}
		if err := UpProjectCPU(s, lat, w, sh, stride, out[rank*shard:], hidden); err != nil {
			return err
		}
		last := (M-1)*hidden + rank*shard + shard - 1
		switch d.bug {
		case "writes past the slice":
			out[(last+1)%len(out)] = 0x3F80
		case "skips an element":
			out[last] = poison
		case "stores negative zero":
			out[rank*shard] = NegZero
		case "wrong value":
			out[last] ^= 0x0100 // the exponent's low bit: twice or half the value
		case "not deterministic":
			if d.launches[fmt.Sprintf("M=%d", M)]%2 == 0 {
				out[last] ^= 1
			}
		}
	}
	return nil
}

// rotation reads the slot rotation counter at counter (skinny.h, "Slot
// rotation"): the byte offset of the slot it names, and the advance that
// the kernel ending the step makes (word 0 to the next slot, word 1, the
// arrival count, back to 0). It checks the launch's fields and that the
// counter is between steps (no arrivals counted, a slot in range).
func (d *emuDevice) rotation(counter cuda.DevicePtr, stride uint64, slots int) (uint64, func(), error) {
	if counter%8 != 0 || slots < 2 || stride == 0 || stride%16 != 0 {
		return 0, nil, fmt.Errorf("emu: rotation counter %#x, %d slots, stride %d", uint64(counter), slots, stride)
	}
	w, err := d.words(counter, 2)
	if err != nil {
		return 0, nil, fmt.Errorf("emu: rotation counter: %w", err)
	}
	if int(w[0]) >= slots || w[1] != 0 {
		return 0, nil, fmt.Errorf("emu: rotation counter {%d, %d} with %d slots", w[0], w[1], slots)
	}
	s := uint64(w[0])
	return s * stride, func() { w[0], w[1] = uint32((s+1)%uint64(slots)), 0 }, nil
}

// runReceive is the receive kernel in Go, one 16-byte vector at a time
// as the kernel works; a missing vector costs the timeout once.
func (d *emuDevice) runReceive(p []byte) error {
	le := binary.LittleEndian
	m, hidden, shard := int(le.Uint32(p[32:])), int(le.Uint32(p[36:])), int(le.Uint32(p[40:]))
	timeout := time.Duration(le.Uint64(p[24:]))
	slotAddr := cuda.DevicePtr(le.Uint64(p[0:]))
	if counter := cuda.DevicePtr(le.Uint64(p[48:])); counter != 0 {
		// The slot the counter names; the receive ends the step.
		rot, advance, err := d.rotation(counter, le.Uint64(p[56:]), int(int32(le.Uint32(p[64:]))))
		if err != nil {
			return err
		}
		slotAddr += cuda.DevicePtr(rot)
		if d.bug != "receive never advances the slot" {
			advance()
		}
	}
	slot, err1 := d.words(slotAddr, m*hidden/2)
	out, err2 := d.words(cuda.DevicePtr(le.Uint64(p[8:])), m*hidden/2)
	status, err3 := d.words(cuda.DevicePtr(le.Uint64(p[16:])), ReceiveStatusWords)
	if err := errors.Join(err1, err2, err3); err != nil {
		return fmt.Errorf("emu: receive operands: %w", err)
	}
	flags := le.Uint32(p[44:])
	if flags&^(ReceiveAbortable|ReceiveSkip|0xff<<ReceiveSkipRankShift) != 0 {
		return fmt.Errorf("emu: receive flags %#x", flags)
	}
	skipped := -1 // the rank whose columns are left alone
	if flags&ReceiveSkip != 0 {
		skipped = int(flags >> ReceiveSkipRankShift & 0xff)
		switch d.bug {
		case "receive ignores the skip":
			skipped = -1
		case "receive skips the wrong rank":
			skipped = (skipped + 1) % (hidden / shard)
		}
	}
	lost := false
	for v := 0; v < len(slot); v += 4 {
		if (2*v%hidden)/shard == skipped {
			continue
		}
		if slices.Contains(slot[v:v+4], Sentinel) {
			lost = true
			status[0] = 1
			status[1+(2*v%hidden)/shard] = 1
			continue
		}
		copy(out[v:v+4], slot[v:v+4])
		if d.bug != "receive does not re-arm" {
			for j := v; j < v+4; j++ {
				slot[j] = Sentinel
			}
		}
	}
	if d.bug == "receive blames the wrong rank" && lost {
		clear(status[1:])
		status[1] = 1
	}
	if lost && d.bug != "receive gives up early" {
		time.Sleep(timeout)
	}
	return nil
}

// The harness of gpu_test.go on the emulated device, with smaller shapes.
func TestHarnessOnEmulator(t *testing.T) {
	d := newEmuDevice()
	e := newEnv(t, d, true)
	rng := testRand(t)
	t.Run("matrix", func(t *testing.T) {
		runSkinnyMatrix(e.sub(t), rng, matrixSpec{ms: []int{1, 2, 8}, shards: []int{448, 1024}, latents: []int{512, 3600}})
		// A measured shape whose config prefetches into L2 (1792, M 2).
		runSkinnyMatrix(e.sub(t), rng, matrixSpec{ms: []int{2}, shards: []int{1792}, latents: []int{3584}})
	})
	t.Run("larger M matrix", func(t *testing.T) {
		// Every code size at the table's small shards (clusters of 8 CTAs
		// and K split inside the CTA) and the odd 960 with latent 720.
		runSkinnyMatrix(e.sub(t), rng, matrixSpec{ms: []int{9, 32, 33, 128}, shards: []int{448, 960}, latents: []int{720}})
	})
	t.Run("receive", func(t *testing.T) { runReceiveFull(e.sub(t), rng, 5, 7168, 896) })
	runReceiveTimeouts(t, e, rng, 20*time.Millisecond)
	for _, mode := range []stepReceive{receiveKernel, receiveFused, receiveFusedSkip} {
		t.Run("graph, "+mode.String(), func(t *testing.T) {
			runStepInGraph(e.sub(t), rng, Shape{M: 3, Hidden: 1024, Latent: 512, TP: 4}, 3, mode)
		})
	}
	t.Run("PDL chain", func(t *testing.T) {
		runPDLChain(e.sub(t), rng, Shape{M: 4, Hidden: 1024, Latent: 1024, TP: 1}, 448, 3)
	})
	for _, mode := range []stepReceive{receiveKernel, receiveKernelSkip, receiveFused, receiveFusedSkip} {
		t.Run("slot rotation, "+mode.String(), func(t *testing.T) {
			runRotation(e.sub(t), rng, Shape{M: 3, Hidden: 4 * 72, Latent: 520, TP: 4}, 3, 7, mode, 20*time.Millisecond)
		})
	}
	runSmall(t, e, rng, 20*time.Millisecond)
	if len(d.allocs) != 0 {
		t.Errorf("%d allocations not freed", len(d.allocs))
	}
	// ("cluster>1" is not required: the emulator's small shapes may take no
	// cluster; the launch attribute is pinned by the fake-driver launch
	// tests and every cluster size by the GPU harness.)
	for _, name := range []string{"M=1", "M=8", "M=9", "M=128", "bigm", receiveName, "pdl", "l2 prefetch", "fused receive", "rotation"} {
		if d.launches[name] == 0 {
			t.Errorf("no launches of %s: %v", name, d.launches)
		}
	}
	t.Logf("launches: %v", d.launches)
}

// recorder is a testing.TB that keeps failures instead of reporting them,
// so a test can assert that a body failed.
type recorder struct {
	testing.TB
	failed   []string
	cleanups []func()
}

func (r *recorder) Helper()             {}
func (r *recorder) Logf(string, ...any) {}
func (r *recorder) Cleanup(f func())    { r.cleanups = append(r.cleanups, f) }
func (r *recorder) Errorf(format string, args ...any) {
	r.failed = append(r.failed, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

// run calls body as a test would, on its own goroutine (for Goexit), then
// the cleanups it registered.
func (r *recorder) run(body func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		body()
	}()
	<-done
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

// Every check of the harness must be able to fail: each emulated bug has
// to make the body that should notice it fail.
func TestHarnessCatchesBugs(t *testing.T) {
	small := matrixSpec{ms: []int{1, 3}, shards: []int{40, 448}, latents: []int{520}}
	matrix := func(e *env, rng *rand.Rand) { runSkinnyMatrix(e, rng, small) }
	// The kernel for M above MaxSkinnyM alone (so only its launches can
	// carry the bug).
	large := func(e *env, rng *rand.Rand) {
		runSkinnyMatrix(e, rng, matrixSpec{ms: []int{9, 100}, shards: []int{40, 448}, latents: []int{520}})
	}
	largeRotation := func(e *env, rng *rand.Rand) {
		runRotation(e, rng, Shape{M: 20, Hidden: 3 * 40, Latent: 64, TP: 3}, 2, 3, receiveKernel, 20*time.Millisecond)
	}
	timeout := func(e *env, rng *rand.Rand) {
		runReceiveTimeout(e, rng, receiveTimeoutCases[0], 2, 72, 20*time.Millisecond)
	}
	rotation := func(mode stepReceive) func(*env, *rand.Rand) {
		return func(e *env, rng *rand.Rand) {
			runRotation(e, rng, Shape{M: 2, Hidden: 3 * 40, Latent: 64, TP: 3}, 2, 3, mode, 20*time.Millisecond)
		}
	}
	tests := []struct {
		bug  string
		body func(*env, *rand.Rand)
	}{
		{"writes past the slice", matrix},
		{"skips an element", matrix},
		{"stores negative zero", matrix},
		{"wrong value", matrix},
		{"not deterministic", matrix},
		{"ignores destinations after the first", matrix},
		{"writes past the slice", large},
		{"skips an element", large},
		{"stores negative zero", large},
		{"wrong value", large},
		{"not deterministic", large},
		{"ignores destinations after the first", large},
		{"skinny uses slot 0", largeRotation},
		{"receive never advances the slot", largeRotation},
		{"PDL reads latent early", func(e *env, rng *rand.Rand) {
			runPDLChain(e, rng, Shape{M: 17, Hidden: 64, Latent: 64, TP: 1}, 16, 2)
		}},
		{"stores negative zero", runNegativeZero},
		{"receive does not re-arm", func(e *env, rng *rand.Rand) { runReceiveFull(e, rng, 2, 216, 72) }},
		{"receive does not re-arm", func(e *env, rng *rand.Rand) {
			runStepInGraph(e, rng, Shape{M: 2, Hidden: 216, Latent: 64, TP: 3}, 2, receiveKernel)
		}},
		{"receive does not re-arm", func(e *env, rng *rand.Rand) {
			runStepInGraph(e, rng, Shape{M: 2, Hidden: 216, Latent: 64, TP: 3}, 2, receiveFused)
		}},
		{"receive does not re-arm", func(e *env, rng *rand.Rand) {
			runStepInGraph(e, rng, Shape{M: 2, Hidden: 216, Latent: 64, TP: 3}, 2, receiveFusedSkip)
		}},
		{"receive ignores the skip", func(e *env, rng *rand.Rand) { runReceiveSkip(e, rng, 2, 216, 72, 1) }},
		{"receive skips the wrong rank", func(e *env, rng *rand.Rand) { runReceiveSkip(e, rng, 2, 216, 72, 2) }},
		{"receive blames the wrong rank", timeout},
		{"receive gives up early", timeout},
		{"skinny uses slot 0", rotation(receiveKernel)},
		{"skinny uses slot 0", rotation(receiveFused)},
		{"skinny rotates every destination", rotation(receiveFusedSkip)},
		{"skinny rotates every destination", rotation(receiveKernelSkip)},
		{"receive never advances the slot", rotation(receiveKernel)},
		{"receive never advances the slot", rotation(receiveFused)},
		{"receive does not re-arm", rotation(receiveKernel)},
		{"stores negative zero", rotation(receiveFused)},
		{"PDL reads latent early", func(e *env, rng *rand.Rand) {
			runPDLChain(e, rng, Shape{M: 2, Hidden: 64, Latent: 64, TP: 1}, 16, 2)
		}},
	}
	rng := testRand(t)
	for _, tc := range tests {
		t.Run(tc.bug, func(t *testing.T) {
			d := newEmuDevice()
			d.bug = tc.bug
			r := &recorder{TB: t}
			r.run(func() { tc.body(newEnv(r, d, true), rng) })
			if len(r.failed) == 0 {
				t.Fatalf("the harness did not notice: %s", tc.bug)
			}
			t.Logf("noticed: %s", r.failed[0])
			if len(d.allocs) != 0 {
				t.Errorf("%d allocations not freed", len(d.allocs))
			}
		})
	}
}

// skinnyM is the M of a skinny entry point "tprun_skinny_m<M><variant>".
func skinnyM(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "tprun_skinny_m")
	if !ok || rest == "" || rest[0] < '1' || rest[0] > '0'+MaxSkinnyM || strings.HasSuffix(name, rotSuffix) || !slices.Contains(mustSkinnyFunctions(), name) {
		return 0, false
	}
	return int(rest[0] - '0'), true
}

// The receive flag, the abort word and the L2 prefetch field layout are
// the header's.
func TestReceiveAndPrefetchConstantsMatchHeader(t *testing.T) {
	src, err := os.ReadFile("skinny.h")
	if err != nil {
		t.Fatalf("reading the kernel ABI header: %v", err)
	}
	defs := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^#define (\w+)(\(x\))? (.+?)\s*$`).FindAllStringSubmatch(string(src), -1) {
		defs[m[1]] = m[3]
	}
	for name, want := range map[string]string{
		"TPRUN_RECEIVE_ABORT_WORD": fmt.Sprint(ReceiveAbortWord),
		"TPRUN_RECEIVE_ABORTABLE":  fmt.Sprint(ReceiveAbortable),
		"TPRUN_RECEIVE_SKIP":       fmt.Sprint(ReceiveSkip),
		"TPRUN_RECEIVE_SKIP_RANK":  fmt.Sprintf("(((x) >> %d) & 0xff)", ReceiveSkipRankShift),
		"TPRUN_PF_HELPERS":         "((x) & 0xffff)",
		"TPRUN_PF_SIXTEENTHS":      fmt.Sprintf("(((x) >> %d) & 0xff)", pfSixteenthsShift),
		"TPRUN_PF_OWN":             "(((x) >> 24) & 1)",
		"TPRUN_PF_LSU":             "(((x) >> 25) & 1)",
		"TPRUN_SKINNY_PACKED":      fmt.Sprint(SkinnyPacked),
		"TPRUN_SKINNY_ROWS_SHIFT":  fmt.Sprint(SkinnyRowsShift),
		"TPRUN_SKINNY_ROWS":        "(((x) >> TPRUN_SKINNY_ROWS_SHIFT) & 0xff)",
	} {
		if defs[name] != want {
			t.Errorf("skinny.h: %s is %q, the Go side assumes %q", name, defs[name], want)
		}
	}
	if ReceiveAbortWord < ReceiveStatusWords {
		t.Errorf("abort word %d overlaps the %d status words", ReceiveAbortWord, ReceiveStatusWords)
	}
	for _, c := range []struct {
		x  int
		ok bool
	}{{0, true}, {1 << 24, true}, {32 | 16<<16 | 1<<24, true}, {0xffff | 16<<16, true},
		{1 << 25, true}, {1<<25 | 1<<24 | 40 | 8<<16, true}, {17 << 16, false}, {1 << 26, false}, {-1, false}} {
		if got := validPrefetch(c.x); got != c.ok {
			t.Errorf("validPrefetch(%#x) = %v, want %v", c.x, got, c.ok)
		}
	}
}

// FatbinEnv replaces the embedded fatbin with a file's bytes; a file that
// cannot be read is an error naming the variable, before any driver call.
func TestLoadFatbinOverride(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev.fatbin")
	want := []byte("not really a fatbin, but the driver is a fake")
	if err := os.WriteFile(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(FatbinEnv, path)
	d := newFakeDriver("")
	k, err := Load(d)
	if err != nil {
		t.Fatalf("Load with %s=%s: %v", FatbinEnv, path, err)
	}
	if !slices.Equal(d.image, want) {
		t.Errorf("ModuleLoadData got %d bytes, want the %d of %s", len(d.image), len(want), path)
	}
	if FatbinOverride() != path {
		t.Errorf("FatbinOverride() = %q, want %q", FatbinOverride(), path)
	}
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	t.Setenv(FatbinEnv, path+".missing")
	d = newFakeDriver("")
	if _, err := Load(d); err == nil || !strings.Contains(err.Error(), FatbinEnv) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load with a missing file: %v; want an error naming %s", err, FatbinEnv)
	}
	if d.image != nil {
		t.Errorf("the driver was called (%d bytes) although the file is missing", len(d.image))
	}
}

// SkipSlice sets TPRUN_RECEIVE_SKIP and the rank in the flags, and a
// launch polls only the other ranks' columns: fewer receive threads.
func TestReceiveSkipFlagsAndGrid(t *testing.T) {
	for _, abortable := range []bool{false, true} {
		a := goodReceiveArgs()
		a.Abortable, a.SkipSlice, a.SkipRank = abortable, true, 5
		p, err := receiveParams(a)
		want := int32(ReceiveSkip | 5<<ReceiveSkipRankShift)
		if abortable {
			want |= ReceiveAbortable
		}
		if err != nil || p.Flags != want {
			t.Errorf("abortable %v: flags %#x, %v; want %#x", abortable, p.Flags, err, want)
		}
	}
	s := Shape{M: 8, Hidden: 7168, Latent: 3584, TP: 2}
	c := StepConfigFor(s.M, s.Shard(), s.Latent)
	for _, skip := range []bool{false, true} {
		d := newFakeDriver("")
		k, err := Load(d)
		if err != nil {
			t.Fatal(err)
		}
		r := fusedReceive(s)
		r.SkipSlice, r.SkipRank = skip, 1
		a := SkinnyArgs{Shape: s, Rank: 1, Latent: 0x7f0000000000, Weight: 0x7f0000100000, WeightPacked: true,
			Shared: 0x7f0000200000 + 2*3584, SharedStride: 7168, Dst: []cuda.DevicePtr{0x7f0000300000, r.Out}, Receive: r}
		if err := k.LaunchSkinny(0, a, true); err != nil {
			t.Fatalf("skip %v: %v", skip, err)
		}
		polled := s.Hidden
		if skip {
			polled -= s.Shard()
		}
		want := c.GridX + ReceiveCTAs(s.M, polled, c.BlockX, c.Cluster)
		if got := int(d.launches[0].cfg.Grid[0]); got != want {
			t.Errorf("skip %v: grid %d, want %d", skip, got, want)
		}
	}
	if a, b := ReceiveCTAs(8, 7168, 256, 1), ReceiveCTAs(8, 3584, 256, 1); b >= a {
		t.Errorf("skipping half the columns leaves %d receive CTAs of %d", b, a)
	}
}

// A launch with a fused receive takes the step table's config, with the
// receive CTAs appended to its grid and the recv_* fields set; without one,
// the kernel table's. The test swaps in a step table of its own for latent
// 3584, shard 3584, M 3: the kernel table's config with another L2 prefetch
// plan, so a launch that ignored the step table fails here whatever the
// measured tables hold. The launch must keep the step config's plan (the
// kernel counts its tiles from the shard, not the grid).
func TestLaunchSkinnyFusedReceive(t *testing.T) {
	s := Shape{M: 3, Hidden: 7168, Latent: 3584, TP: 2}
	kc := ConfigFor(s.M, s.Shard(), s.Latent)
	kernelTable, err := measured()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(kernelTable, func(e tableEntry) bool {
		return e.latent == s.Latent && e.shard == s.Shard() && e.m == s.M
	})
	if i < 0 {
		t.Fatalf("the kernel table has no entry for %v", s)
	}
	e := kernelTable[i]    // a copy: the measured table is never modified
	e.prefetch = 0x2080028 // pf40.8l
	if kc.L2Prefetch == e.prefetch {
		e.prefetch = 0x2080030 // pf48.8l
	}
	plan := e.prefetch
	entries := []tableEntry{e}
	saved := stepMeasured
	stepMeasured = func() ([]tableEntry, error) { return entries, nil }
	// LaunchSkinny's configs were looked up in the real tables, and those
	// made here must not outlive the swap: clear them both ways.
	skinnyConfigs.Clear()
	t.Cleanup(func() { stepMeasured = saved; skinnyConfigs.Clear() })
	sc := StepConfigFor(s.M, s.Shard(), s.Latent)
	if sc.L2Prefetch != plan || sc == kc {
		t.Fatalf("the test's step table was not used: step config %+v, kernel config %+v", sc, kc)
	}
	for _, fused := range []bool{false, true} {
		d := newFakeDriver("")
		k, err := Load(d)
		if err != nil {
			t.Fatal(err)
		}
		a := SkinnyArgs{Shape: s, Rank: 1, Latent: 0x7f0000000000, Weight: 0x7f0000100000,
			Shared: 0x7f0000200000 + 2*cuda.DevicePtr(s.Shard()), SharedStride: 7168, Dst: []cuda.DevicePtr{0x7f0000300000},
			WeightPacked: true}
		want, wantGrid, wantSlot := kc, kc.GridX, uint64(0)
		if fused {
			a.Receive = fusedReceive(s)
			want, wantGrid, wantSlot = sc, sc.GridX+ReceiveCTAs(s.M, s.Hidden, sc.BlockX, sc.Cluster), uint64(a.Receive.Slot)
		}
		if err := k.LaunchSkinny(0, a, true); err != nil {
			t.Fatalf("fused %v: %v", fused, err)
		}
		l := d.launches[0]
		p := l.params[0]
		le := binary.LittleEndian
		got := fmt.Sprintf("function %v grid %d block %d cluster %d smem %d tile_rows %d l2_prefetch %#x recv_slot %#x",
			l.f, l.cfg.Grid[0], l.cfg.Block[0], l.cfg.ClusterDim[0], l.cfg.SharedMem, le.Uint32(p[176:]), le.Uint32(p[180:]), le.Uint64(p[184:]))
		exp := fmt.Sprintf("function %v grid %d block %d cluster %d smem %d tile_rows %d l2_prefetch %#x recv_slot %#x",
			k.skinny[want.Function], wantGrid, want.BlockX, want.Cluster, want.SharedBytes, want.TileRows, want.L2Prefetch, wantSlot)
		if got != exp {
			t.Errorf("fused %v (%s):\n got %s\nwant %s", fused, want.Function, got, exp)
		}
	}
}

// A launch with slot rotation takes the entry point with rotSuffix, and
// only such a launch: without a counter, the plain one.
func TestRotationEntryPoints(t *testing.T) {
	d := newFakeDriver("")
	k, err := Load(d)
	if err != nil {
		t.Fatal(err)
	}
	c := ConfigFor(4, 896, 3584)
	for _, rotated := range []bool{false, true} {
		a, r := goodSkinnyArgs(), goodReceiveArgs()
		skinny, receive := d.funcs[c.Function], d.funcs[receiveName]
		if rotated {
			a.Rotation, r.Rotation = goodRotation(), goodRotation()
			skinny, receive = d.funcs[c.Function+rotSuffix], d.funcs[receiveName+rotSuffix]
		}
		d.launches = nil
		if err := k.LaunchSkinny(0, a, true); err != nil {
			t.Fatal(err)
		}
		if err := k.LaunchReceive(0, r, true); err != nil {
			t.Fatal(err)
		}
		if len(d.launches) != 2 || d.launches[0].f != skinny || d.launches[1].f != receive || skinny == 0 || receive == 0 {
			t.Errorf("rotation %v: launched %#x and %#x, want %#x and %#x", rotated, d.launches[0].f, d.launches[1].f, skinny, receive)
		}
	}
}

// TestSkinnyConfigCached: the config LaunchSkinny launches by is the
// lookup's (ConfigFor, or StepConfigFor with the fused receive), with its
// Validate verdict, on the first call and on every later one; shapes off
// the tables and ones Validate refuses included.
func TestSkinnyConfigCached(t *testing.T) {
	for _, fused := range []bool{false, true} {
		lookup := ConfigFor
		if fused {
			lookup = StepConfigFor
		}
		for _, sh := range [][2]int{{7168, 3584}, {3584, 3584}, {896, 3584}, {448, 3584}, {960, 720}, {24, 40}, {8, 8}, {7, 8}} {
			for m := 1; m <= MaxM; m++ {
				want := lookup(m, sh[0], sh[1])
				wantErr := want.Validate(m, sh[0], sh[1])
				for range 2 {
					got := skinnyConfig(fused, m, sh[0], sh[1])
					if got.c != want || fmt.Sprint(got.err) != fmt.Sprint(wantErr) || got.rotName != want.Function+rotSuffix {
						t.Fatalf("fused %v, m %d, shard %d, latent %d: got %+v (%v, %q), want %+v (%v)",
							fused, m, sh[0], sh[1], got.c, got.err, got.rotName, want, wantErr)
					}
				}
			}
		}
	}
}
