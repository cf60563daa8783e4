package tp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tprun/tprun/kernel"
	"github.com/tprun/tprun/mailbox"
)

// poison fills the output before a step: a NaN pattern the op never
// produces from these inputs, so an element left unwritten fails the check.
const poison kernel.BF16 = 0xFFC1

// upStepData is one step's inputs for the whole group and the float64
// yardstick of the whole [M, hidden] block.
type upStepData struct {
	m      int
	latent []kernel.BF16 // [M, latent]
	weight []kernel.BF16 // the full [hidden, latent]
	shared []kernel.BF16 // the full [M, hidden]
	want   *kernel.Expected
}

// newUpSteps draws fresh inputs for every step, so that a stale or mixed
// read of a slot cannot pass for the right answer.
func newUpSteps(t *testing.T, seed uint64, hidden, latent int, ms []int) []upStepData {
	t.Helper()
	rng := kernel.NewRand(seed)
	steps := make([]upStepData, len(ms))
	for i, m := range ms {
		d := upStepData{m: m, latent: make([]kernel.BF16, m*latent), weight: make([]kernel.BF16, hidden*latent),
			shared: make([]kernel.BF16, m*hidden)}
		kernel.FillRandom(rng, d.latent, 1)
		kernel.FillRandom(rng, d.weight, 1/float32(latent))
		kernel.FillRandom(rng, d.shared, 0.5)
		// With TP=1 and the full weight, Expect covers the whole block.
		want, err := kernel.Expect(kernel.Shape{M: m, Hidden: hidden, Latent: latent, TP: 1}, d.latent, d.weight, d.shared, hidden)
		if err != nil {
			t.Fatal(err)
		}
		d.want = want
		steps[i] = d
	}
	return steps
}

func TestUpProjectionMatchesReference(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	tests := []struct {
		desc               string
		tp, hidden, latent int
		maxM               int
		slots              int
		ms                 []int
		backend            mailbox.Kind
	}{
		{desc: "one rank", tp: 1, hidden: 64, latent: 40, maxM: 3, ms: []int{1, 3, 2, 3}},
		{desc: "two ranks, every M", tp: 2, hidden: 256, latent: 96, maxM: 8, ms: []int{8, 1, 2, 3, 4, 5, 6, 7, 8}},
		{desc: "odd tp 3", tp: 3, hidden: 72, latent: 64, maxM: 4, ms: []int{4, 2, 4, 1, 3, 4}, backend: mailbox.KindHost},
		{desc: "four ranks, two slots", tp: 4, hidden: 512, latent: 128, maxM: 8, slots: 2, ms: []int{1, 2, 4, 8, 8, 8, 1}},
		{desc: "five ranks, latent 8", tp: 5, hidden: 80, latent: 8, maxM: 2, ms: []int{2, 1, 2, 2, 1}},
		// Past the GPU kernels: the host backend takes every M up to MaxM,
		// the own regions and the shared one of the mailbox in one op.
		{desc: "tp 3, M up to 100", tp: 3, hidden: 48, latent: 72, maxM: 100, ms: []int{100, 9, 100, 3, 64, 100}, backend: mailbox.KindHost},
		{desc: "tp 3, M up to 128", tp: 3, hidden: 96, latent: 200, maxM: MaxM, ms: []int{MaxM, 31, 1, MaxM, 8, 9, MaxM}, backend: mailbox.KindHost},
	}
	for i, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			steps := newUpSteps(t, seed+uint64(i), tc.hidden, tc.latent, tc.ms)
			shard := tc.hidden / tc.tp
			got := make([][][]kernel.BF16, tc.tp) // [rank][step] block
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errs := onUpRanks(tc.tp, func(r int, ex mailbox.Exchanger) (err error) {
				up, err := NewUpProjection(ctx, ex, tc.hidden, tc.latent, tc.maxM,
					WithBackend(tc.backend), WithSlots(tc.slots), WithDeadline(10*time.Second))
				if err != nil {
					return err
				}
				defer func() { err = errors.Join(err, up.Close()) }()
				// Auto is the host backend without a GPU, the CUDA engine with one.
				if (tc.backend == mailbox.KindHost && up.Backend() != "host") || up.Rank() != r || up.Shape().M != tc.maxM {
					return fmt.Errorf("backend %q rank %d shape %v", up.Backend(), up.Rank(), up.Shape())
				}
				// Each rank gets its own copy of its operands, as a
				// separate process would.
				weight := append([]kernel.BF16(nil), steps[0].weight[r*shard*tc.latent:(r+1)*shard*tc.latent]...)
				for i, d := range steps {
					if i > 0 {
						weight = append(weight[:0], d.weight[r*shard*tc.latent:(r+1)*shard*tc.latent]...)
					}
					out := make([]kernel.BF16, tc.maxM*tc.hidden+5)
					for j := range out {
						out[j] = poison
					}
					in := UpInputs{M: d.m, Latent: append([]kernel.BF16(nil), d.latent...), Weight: weight,
						Shared: append([]kernel.BF16(nil), d.shared[r*shard:]...), SharedStride: tc.hidden}
					if err := up.Step(ctx, in, out); err != nil {
						return err
					}
					if err := keepBlock(i, d.m, tc.hidden, out, &got[r]); err != nil {
						return err
					}
				}
				if n := up.Steps(); n != uint64(len(steps)) {
					return fmt.Errorf("Steps() = %d after %d steps", n, len(steps))
				}
				return nil
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			for i, d := range steps {
				res, err := d.want.Check(got[0][i], tc.hidden)
				if err != nil {
					t.Fatal(err)
				}
				if res.Wrong > 0 || res.Checked != d.m*tc.hidden {
					t.Errorf("step %d (M=%d): %d of %d wrong, first %v", i, d.m, res.Wrong, res.Checked, res.First)
				}
				for r := 1; r < tc.tp; r++ {
					if !equalBlocks(got[0][i], got[r][i]) {
						t.Errorf("step %d: rank %d's block differs from rank 0's", i, r)
					}
				}
			}
		})
	}
}

func equalBlocks(a, b []kernel.BF16) bool {
	var ab, bb bytes.Buffer
	_ = binary.Write(&ab, binary.LittleEndian, a)
	_ = binary.Write(&bb, binary.LittleEndian, b)
	return bytes.Equal(ab.Bytes(), bb.Bytes())
}

func TestNewUpProjectionRejectsBadShapes(t *testing.T) {
	tests := []struct {
		desc                     string
		tp, hidden, latent, maxM int
		want                     []string // substrings of the error
	}{
		{"hidden not divisible by tp", 3, 1000, 512, 8, []string{"hidden_dim % tp = 1", "hidden_dim 1000, tp 3"}},
		{"shard not a multiple of 8", 4, 1000, 512, 8, []string{"shard_dim = 250", "multiple of 8"}},
		{"latent not a multiple of 8", 2, 256, 100, 8, []string{"latent_dim = 100"}},
		{"maxM too large", 2, 256, 64, 129, []string{"maxM = 129", "1..128"}},
		{"maxM zero", 2, 256, 64, 0, []string{"maxM = 0"}},
		{"tp beyond 16", 17, 17 * 8, 64, 1, []string{"tp = 17"}},
		{"several at once", 3, 1000, 100, 200, []string{"maxM = 200", "latent_dim = 100", "hidden_dim % tp = 1"}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// Every rank checks its own arguments before the mailbox's
			// setup, and all of them fail together.
			errs := onUpRanks(tc.tp, func(r int, ex mailbox.Exchanger) error {
				up, err := NewUpProjection(ctx, ex, tc.hidden, tc.latent, tc.maxM)
				if err == nil {
					return errors.Join(errors.New("no error"), up.Close())
				}
				if !errors.Is(err, kernel.ErrShape) {
					return fmt.Errorf("error %v does not match kernel.ErrShape", err)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						return fmt.Errorf("error %q does not mention %q", err, w)
					}
				}
				return nil
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestNewUpProjectionRanksDisagree: ranks that pass different shapes, or
// one rank whose arguments are bad, fail on every rank at setup, naming
// what differs, instead of computing a mixed block or waiting.
func TestNewUpProjectionRanksDisagree(t *testing.T) {
	const tp = 3
	type args struct{ hidden, latent, maxM int }
	tests := []struct {
		desc    string
		of      func(r int) args
		wantIs  func(r int) error
		wantMsg func(r int) []string
	}{
		{"latent differs on rank 1",
			func(r int) args {
				if r == 1 {
					return args{48, 32, 4}
				}
				return args{48, 16, 4}
			},
			func(int) error { return mailbox.ErrConfig },
			func(int) []string { return []string{"disagree", "rank 1 has maxM=4 hidden=48 latent=32"} }},
		{"maxM differs on rank 2",
			func(r int) args {
				if r == 2 {
					return args{48, 16, 8}
				}
				return args{48, 16, 4}
			},
			func(int) error { return mailbox.ErrConfig },
			func(int) []string { return []string{"disagree", "maxM=8"} }},
		{"rank 1's latent is not a multiple of 8",
			func(r int) args {
				if r == 1 {
					return args{48, 12, 4}
				}
				return args{48, 16, 4}
			},
			func(r int) error {
				if r == 1 {
					return kernel.ErrShape
				}
				return mailbox.ErrPeer
			},
			func(r int) []string {
				if r == 1 {
					return []string{"latent_dim = 12"}
				}
				return []string{"rank 1", "latent_dim = 12"}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errs := onUpRanks(tp, func(r int, ex mailbox.Exchanger) error {
				a := tc.of(r)
				up, err := NewUpProjection(ctx, ex, a.hidden, a.latent, a.maxM, WithBackend(mailbox.KindHost))
				if err == nil {
					return errors.Join(errors.New("no error"), up.Close())
				}
				if !errors.Is(err, tc.wantIs(r)) {
					return fmt.Errorf("error %v does not match %v", err, tc.wantIs(r))
				}
				for _, w := range tc.wantMsg(r) {
					if !strings.Contains(err.Error(), w) {
						return fmt.Errorf("error %q does not mention %q", err, w)
					}
				}
				return nil
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestUpProjectionConcurrentStep: a Step that starts while another Step of
// the same op waits fails at once with ErrBusy, and the waiting one is
// unharmed.
func TestUpProjectionConcurrentStep(t *testing.T) {
	const tp, hidden, latent = 2, 48, 16
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rng := kernel.NewRand(uint64(time.Now().UnixNano()))
	in := randomInputs(rng, 2, hidden, latent, tp, 1)
	second := make(chan struct{}) // rank 0 has seen ErrBusy: rank 1 may step
	errs := onUpRanks(tp, func(r int, ex mailbox.Exchanger) (err error) {
		up, err := NewUpProjection(ctx, ex, hidden, latent, 2, WithBackend(mailbox.KindHost))
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, up.Close()) }()
		out := make([]kernel.BF16, 2*hidden)
		if r == 1 {
			<-second
			return up.Step(ctx, in, out)
		}
		first := make(chan error, 1)
		go func() { first <- up.Step(ctx, in, out) }()
		for !up.busy.Load() {
			time.Sleep(time.Millisecond)
		}
		err = up.Step(ctx, in, make([]kernel.BF16, 2*hidden))
		close(second)
		if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "rank 0") {
			return errors.Join(fmt.Errorf("second Step: %v, want ErrBusy naming rank 0", err), <-first)
		}
		if err := <-first; err != nil {
			return fmt.Errorf("first Step: %w", err)
		}
		if up.Steps() != 1 {
			return fmt.Errorf("Steps() = %d, want 1", up.Steps())
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func TestUpProjectionStepRejectsBadInputs(t *testing.T) {
	const tp, hidden, latent, maxM = 2, 64, 16, 4
	shard := hidden / tp
	good := func(m int) (UpInputs, []kernel.BF16) {
		rng := kernel.NewRand(uint64(time.Now().UnixNano()))
		in := randomInputs(rng, m, hidden, latent, tp, 0.25)
		return in, make([]kernel.BF16, m*hidden)
	}
	tests := []struct {
		desc   string
		mangle func(in *UpInputs, out *[]kernel.BF16)
		want   []string
	}{
		{"M zero", func(in *UpInputs, _ *[]kernel.BF16) { in.M = 0 }, []string{"M = 0"}},
		{"M beyond maxM", func(in *UpInputs, _ *[]kernel.BF16) { in.M = 5 }, []string{"M = 5", "1..4 (the maxM given to NewUpProjection)"}},
		{"M beyond the skinny path", func(in *UpInputs, _ *[]kernel.BF16) { in.M = 9 }, []string{"M = 9"}},
		{"short latent", func(in *UpInputs, _ *[]kernel.BF16) { in.Latent = in.Latent[:len(in.Latent)-1] }, []string{"len(latent) = 47", "48"}},
		{"short weight", func(in *UpInputs, _ *[]kernel.BF16) { in.Weight = in.Weight[:100] }, []string{"len(weight shard) = 100", "512"}},
		{"shared stride below shard", func(in *UpInputs, _ *[]kernel.BF16) { in.SharedStride = 31 }, []string{"shared row stride = 31"}},
		{"short shared", func(in *UpInputs, _ *[]kernel.BF16) { in.Shared = in.Shared[:2*hidden+shard-1] }, []string{"len(shared) = 159"}},
		{"short out", func(_ *UpInputs, out *[]kernel.BF16) { *out = (*out)[:3*hidden-1] }, []string{"len(out) = 191", "M*hidden_dim = 192"}},
		{"several at once", func(in *UpInputs, out *[]kernel.BF16) { in.Latent = nil; *out = nil }, []string{"len(latent) = 0", "len(out) = 0"}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := onUpRanks(tp, func(r int, ex mailbox.Exchanger) (err error) {
		up, err := NewUpProjection(ctx, ex, hidden, latent, maxM)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, up.Close()) }()
		for _, tc := range tests {
			in, out := good(3)
			tc.mangle(&in, &out)
			err := up.Step(ctx, in, out)
			if !errors.Is(err, kernel.ErrShape) {
				return fmt.Errorf("%s: error %v, want one matching kernel.ErrShape", tc.desc, err)
			}
			for _, w := range append(tc.want, fmt.Sprintf("rank %d", r), "step 0") {
				if !strings.Contains(err.Error(), w) {
					return fmt.Errorf("%s: error %q does not mention %q", tc.desc, err, w)
				}
			}
		}
		// Nothing was sent: the group is still in step and can go on.
		in, out := good(3)
		if err := up.Step(ctx, in, out); err != nil {
			return fmt.Errorf("good step after the rejected ones: %w", err)
		}
		if up.Steps() != 1 {
			return fmt.Errorf("Steps() = %d, want 1", up.Steps())
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// TestUpProjectionDeadRank: a rank that stops stepping makes the others'
// next step fail within the deadline, naming it.
//
// The dead rank closes its op only after the others are done: with the
// CUDA engine (what the default backend picks on a GPU machine) these
// in-process ranks share one CUDA context, and the dead rank's Close, which
// frees device memory, can hold a live rank's launch back past the
// deadline; that rank is then blamed too (5 of 50 runs on two H200s, before
// and after the 2026-11-30g changes alike). Separate rank processes have
// separate contexts and no such coupling (TestGPUUpProjectionDeadPeer does
// the same).
func TestUpProjectionDeadRank(t *testing.T) {
	const tp, hidden, latent, dead = 3, 48, 16, 2
	const deadline = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rng := kernel.NewRand(uint64(time.Now().UnixNano()))
	in := randomInputs(rng, 2, hidden, latent, tp, 1)
	var live sync.WaitGroup
	live.Add(tp - 1)
	errs := onUpRanks(tp, func(r int, ex mailbox.Exchanger) (err error) {
		up, err := NewUpProjection(ctx, ex, hidden, latent, 2, WithDeadline(deadline))
		if err != nil {
			if r != dead {
				live.Done()
			}
			return err
		}
		defer func() { err = errors.Join(err, up.Close()) }()
		if r != dead {
			defer live.Done() // before this rank's Close
		}
		out := make([]kernel.BF16, 2*hidden)
		if err := up.Step(ctx, in, out); err != nil {
			return err
		}
		if r == dead {
			live.Wait()
			return nil
		}
		return stepToDeadPeer(ctx, up, r, dead, deadline, in, out)
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func TestUpProjectionBackendsAndOptions(t *testing.T) {
	for _, v := range []string{"NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "TPRUN_MULTICAST"} {
		t.Setenv(v, "")
	}
	tests := []struct {
		desc string
		env  string // VAR=value set for the case
		opts []UpOption
		want error // nil: works
		text string
		// worksOnGPU: where a GPU is usable the case works instead.
		worksOnGPU bool
	}{
		{desc: "auto is host", opts: []UpOption{WithBackend(mailbox.KindAuto)}},
		{desc: "host", opts: []UpOption{WithBackend(mailbox.KindHost), WithSlots(2), WithDeadline(time.Second)}},
		{desc: "unicast needs a GPU", opts: []UpOption{WithBackend(mailbox.KindUnicast)}, want: ErrBackendUnavailable, text: "unicast", worksOnGPU: true},
		{desc: "multicast needs two devices", opts: []UpOption{WithBackend(mailbox.KindMulticast)}, want: ErrBackendUnavailable, text: "multicast"},
		{desc: "multicast forbidden names the variable", env: "NCCL_NVLS_ENABLE=0", opts: []UpOption{WithBackend(mailbox.KindMulticast)},
			want: mailbox.ErrMulticastDisabled, text: "NCCL_NVLS_ENABLE"},
		{desc: "one slot", opts: []UpOption{WithSlots(1)}, want: mailbox.ErrConfig, text: "1"},
		{desc: "negative slots", opts: []UpOption{WithSlots(-2)}, want: mailbox.ErrConfig, text: "WithSlots(-2)"},
		{desc: "negative deadline", opts: []UpOption{WithDeadline(-time.Second)}, want: mailbox.ErrConfig, text: "WithDeadline(-1s)"},
	}
	noGPU := CheckGPU()
	for _, tc := range tests {
		if tc.worksOnGPU && noGPU == nil {
			tc.want = nil
		}
		t.Run(tc.desc, func(t *testing.T) {
			if k, v, ok := strings.Cut(tc.env, "="); ok {
				t.Setenv(k, v)
			}
			up, err := NewUpProjection(context.Background(), newUpHub(1).rank(0), 64, 16, 2, tc.opts...)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				if err := up.Close(); err != nil {
					t.Error(err)
				}
				return
			}
			if err == nil {
				_ = up.Close()
				t.Fatalf("no error, want %v", tc.want)
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Errorf("error %q, want one matching %v and mentioning %q", err, tc.want, tc.text)
			}
		})
	}
}

func TestUpProjectionClose(t *testing.T) {
	const hidden, latent = 32, 8
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rng := kernel.NewRand(uint64(time.Now().UnixNano()))
	in := randomInputs(rng, 1, hidden, latent, 2, 1)
	errs := onUpRanks(2, func(r int, ex mailbox.Exchanger) error {
		up, err := NewUpProjection(ctx, ex, hidden, latent, 1, WithDeadline(time.Minute))
		if err != nil {
			return err
		}
		if r == 1 {
			// Rank 1 never steps: rank 0 waits until its Close.
			return up.Close()
		}
		done := make(chan error, 1)
		go func() { done <- up.Step(ctx, in, make([]kernel.BF16, hidden)) }()
		time.Sleep(50 * time.Millisecond)
		if err := up.Close(); err != nil {
			return err
		}
		select {
		case err := <-done:
			if !errors.Is(err, mailbox.ErrClosed) {
				return fmt.Errorf("step during Close gave %v, want mailbox.ErrClosed", err)
			}
		case <-time.After(10 * time.Second):
			return errors.New("step still waiting 10s after Close")
		}
		if err := up.Close(); err != nil {
			return fmt.Errorf("second Close: %w", err)
		}
		if err := up.Step(ctx, in, make([]kernel.BF16, hidden)); !errors.Is(err, mailbox.ErrClosed) && !errors.Is(err, mailbox.ErrBroken) {
			return fmt.Errorf("step after Close gave %v", err)
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// stepToDeadPeer runs step 1 on a live rank whose peer dead never stepped
// and checks the outcome: a *mailbox.TimeoutError at step 1 that names only
// dead, after the deadline and not much later, then mailbox.ErrBroken on
// the next step.
func stepToDeadPeer(ctx context.Context, up *UpProjection, r, dead int, deadline time.Duration, in UpInputs, out []kernel.BF16) error {
	start := time.Now()
	err := up.Step(ctx, in, out)
	waited := time.Since(start)
	var te *mailbox.TimeoutError
	switch {
	case !errors.As(err, &te) || !errors.Is(err, mailbox.ErrTimeout):
		return fmt.Errorf("rank %d: step 1 gave %v, want a *mailbox.TimeoutError", r, err)
	case len(te.Missing) != 1 || te.Missing[0] != dead || te.Step != 1 || te.Rank != r:
		return fmt.Errorf("rank %d: %v names ranks %v at step %d (rank %d), want [%d] at step 1", r, err, te.Missing, te.Step, te.Rank, dead)
	case !strings.Contains(err.Error(), fmt.Sprint(dead)):
		return fmt.Errorf("rank %d: error %q does not name rank %d", r, err, dead)
	case waited < deadline || waited > deadline+5*time.Second:
		return fmt.Errorf("rank %d: gave up after %v with a deadline of %v", r, waited, deadline)
	}
	if err := up.Step(ctx, in, out); !errors.Is(err, mailbox.ErrBroken) {
		return fmt.Errorf("rank %d: step after the timeout gave %v, want mailbox.ErrBroken", r, err)
	}
	return nil
}

// randomInputs is one rank's operands for an m-row step with hidden split
// tp ways: fresh random latent, weight slice (scaled by wscale) and shared
// rows, never zeros.
func randomInputs(rng *rand.Rand, m, hidden, latent, tp int, wscale float32) UpInputs {
	in := UpInputs{M: m, Latent: make([]kernel.BF16, m*latent), Weight: make([]kernel.BF16, hidden/tp*latent),
		Shared: make([]kernel.BF16, m*hidden), SharedStride: hidden}
	kernel.FillRandom(rng, in.Latent, 1)
	kernel.FillRandom(rng, in.Weight, wscale)
	kernel.FillRandom(rng, in.Shared, 1)
	return in
}

// keepBlock checks that step i wrote nothing past its m×hidden block of
// out (still poison there) and appends the block to got.
func keepBlock(i, m, hidden int, out []kernel.BF16, got *[][]kernel.BF16) error {
	for j, v := range out[m*hidden:] {
		if v != poison {
			return fmt.Errorf("step %d: out[%d] beyond the block was overwritten", i, m*hidden+j)
		}
	}
	*got = append(*got, out[:m*hidden])
	return nil
}
