package job

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tprun/tprun/internal/hub"
	"github.com/tprun/tprun/kernel"
	"github.com/tprun/tprun/mailbox"
	"github.com/tprun/tprun/tp"
)

// onHubRanks runs fn for every rank as a goroutine joined to a real hub
// in this process (a *hub.Client is a group: it has the mailbox's
// collectives), and returns each rank's error and output.
func onHubRanks(t *testing.T, size int, fn func(ctx context.Context, g group, out *bytes.Buffer) error) ([]error, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const token = "job-test-token"
	srv, err := hub.Listen(hub.ServerConfig{WorldSize: size, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	sctx, stop := context.WithCancel(ctx)
	go func() { served <- srv.Serve(sctx) }()
	defer func() {
		stop()
		<-served
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	}()
	errs := make([]error, size)
	outs := make([]bytes.Buffer, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() {
			c, err := hub.Dial(ctx, srv.Path(), hub.Hello{Rank: r, WorldSize: size, LocalRank: r, Token: token})
			if err != nil {
				errs[r] = err
				return
			}
			errs[r] = fn(ctx, c, &outs[r])
			// A rank that returned early (a failure) leaves the hub
			// only when the rest are done too, as a dead process's
			// socket would not: the others must notice through the
			// mailbox deadline, not through the hub.
			if errs[r] == nil {
				errs[r] = c.Close()
			} else {
				defer c.Close()
			}
		})
	}
	wg.Wait()
	s := make([]string, size)
	for r := range outs {
		s[r] = outs[r].String()
	}
	return errs, s
}

func testConfig(args ...string) *Config {
	c, err := parse(args...)
	if err != nil {
		panic(err)
	}
	return c
}

func TestRunChecksAndReports(t *testing.T) {
	seed := time.Now().UnixNano()
	tests := []struct {
		desc string
		tp   int
		args []string
	}{
		{"three ranks, odd tp, auto backend", 3, []string{"--hidden", "96", "--latent", "32", "--m", "1,3,8", "--iters", "12"}},
		{"two ranks, cpu, two slots", 2, []string{"--backend", "cpu", "--mailbox", "host", "--hidden", "256", "--latent", "64",
			"--m", "8,2", "--iters", "9", "--slots", "2"}},
		{"one rank", 1, []string{"--hidden", "64", "--latent", "48", "--m", "4", "--iters", "5"}},
		{"three ranks, M past the GPU kernels", 3, []string{"--backend", "cpu", "--hidden", "48", "--latent", "72",
			"--m", "128,9,100", "--iters", "4"}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := testConfig(append(tc.args, "--seed", fmt.Sprint(seed))...)
			errs, outs := onHubRanks(t, tc.tp, func(ctx context.Context, g group, out *bytes.Buffer) error {
				return run(ctx, g, cfg, out, runHooks{die: func() error { return errors.New("no fault was asked for") }})
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("%v\nrank 0 said:\n%s", err, outs[0])
			}
			o := outs[0]
			final := fmt.Sprintf("every block within tolerance, identical on all %d ranks (", tc.tp)
			if tc.tp == 1 {
				final = "every block within tolerance, one rank, so nothing to compare across ranks ("
			}
			wants := []string{kernel.ToleranceFormula, "p50 ", "identical", final} // p50 in µs or ms, as fast as this machine is
			if cfg.Backend == "auto" {
				wants = append(wants, CPUNotice)
			}
			for _, m := range cfg.M {
				// M, hidden, latent, shard, tp, backend, mailbox, iters ... 0 wrong, identical.
				wants = append(wants, fmt.Sprintf("%4d %7d %7d %6d %3d %8s %8s %6d ", m, cfg.Hidden, cfg.Latent, cfg.Hidden/tc.tp, tc.tp, "cpu", "host", cfg.Iters))
			}
			for _, w := range wants {
				if !strings.Contains(o, w) {
					t.Errorf("rank 0's output lacks %q:\n%s", w, o)
				}
			}
			for _, line := range strings.Split(o, "\n") {
				if strings.HasPrefix(line, "#") || line == "" || strings.HasPrefix(line, "no usable GPU") {
					continue
				}
				f := strings.Fields(line)
				if len(f) != 14 || f[12] != "0" || f[13] != "yes" {
					t.Errorf("table row %q: want 14 columns, 0 wrong, identical", line)
				}
			}
			for r := 1; r < tc.tp; r++ {
				if outs[r] != "" {
					t.Errorf("rank %d printed %q; only rank 0 prints the report", r, outs[r])
				}
			}
		})
	}
}

// TestRunCatchesWrongValues: one rank with another seed computes its slice
// from other weights; every rank sees wrong values in those columns and
// Run fails on every rank. (The blocks are still identical across ranks.)
func TestRunCatchesWrongValues(t *testing.T) {
	const size, odd = 3, 2
	errs, outs := onHubRanks(t, size, func(ctx context.Context, g group, out *bytes.Buffer) error {
		seed := "7"
		if g.Rank() == odd {
			seed = "8"
		}
		cfg := testConfig("--hidden", "48", "--latent", "16", "--m", "2,1", "--iters", "4", "--seed", seed)
		return run(ctx, g, cfg, out, runHooks{})
	})
	for r, err := range errs {
		if !errors.Is(err, ErrCheck) {
			t.Errorf("rank %d: %v, want an error matching ErrCheck", r, err)
		}
	}
	for _, w := range []string{"FAILED", "wrong values (ranks 0,1,2)", "M=1: "} {
		if !strings.Contains(outs[0], w) {
			t.Errorf("rank 0's output lacks %q:\n%s", w, outs[0])
		}
	}
	if !strings.Contains(outs[odd], fmt.Sprintf("rank %d: M=2: ", odd)) || !strings.Contains(outs[odd], "of 384 values wrong; first at step 0") {
		t.Errorf("rank %d's output does not report its wrong values:\n%s", odd, outs[odd])
	}
}

// TestRunDeadRank: the rank of --inject-fault stops at its step; the
// others' receive fails within the deadline naming it.
func TestRunDeadRank(t *testing.T) {
	const size, dead, step = 3, 1, 5
	errDied := errors.New("rank died")
	cfg := testConfig("--hidden", "48", "--latent", "16", "--m", "1,2", "--iters", "4", "--deadline", "300ms",
		"--inject-fault", fmt.Sprintf("%d:%d", dead, step))
	start := time.Now()
	errs, outs := onHubRanks(t, size, func(ctx context.Context, g group, out *bytes.Buffer) error {
		return run(ctx, g, cfg, out, runHooks{die: func() error { return errDied }})
	})
	if time.Since(start) > 10*time.Second {
		t.Errorf("the group took %v to notice", time.Since(start))
	}
	for r, err := range errs {
		if r == dead {
			if !errors.Is(err, errDied) || !strings.Contains(outs[r], "injected fault at step 5") {
				t.Errorf("dead rank: %v, output %q", err, outs[r])
			}
			continue
		}
		var te *mailbox.TimeoutError
		if !errors.As(err, &te) || len(te.Missing) != 1 || te.Missing[0] != dead || te.Step != step {
			t.Errorf("rank %d: %v, want a mailbox timeout at step %d naming rank %d", r, err, step, dead)
		}
	}
}

// TestRunRefusesBadFlags: bad combinations fail before any work or any
// collective, with one line naming the flag.
func TestRunRefusesBadFlags(t *testing.T) {
	tests := []struct {
		desc string
		tp   int
		args []string
		flag string // FlagError's flag; "" for another error
		want []string
	}{
		{"hidden not divisible by tp", 3, []string{"--hidden", "1000"}, "hidden", []string{"divisible by --tp 3"}},
		{"shard not a multiple of 8", 4, []string{"--hidden", "1000"}, "hidden", []string{"shard_dim = 250", "multiple of 8"}},
		{"latent not a multiple of 8", 2, []string{"--latent", "100"}, "latent", []string{"latent_dim = 100"}},
		{"tp beyond the kernel's", 17, []string{"--hidden", "1088"}, "tp", []string{"at most 16 ranks"}},
		{"unicast on the cpu", 2, []string{"--mailbox", "unicast"}, "mailbox", []string{"host mailbox"}},
		{"explicit cpu with multicast", 2, []string{"--backend", "cpu", "--mailbox", "multicast"}, "mailbox", nil},
		{"fault beyond the run", 2, []string{"--m", "1,2", "--iters", "3", "--inject-fault", "1:6"}, "inject-fault", []string{"below the 6 steps"}},
		{"fault rank beyond the group", 2, []string{"--inject-fault", "2:0"}, "inject-fault", nil},
		{"cuda not there yet", 2, []string{"--backend", "cuda"}, "", []string{"--backend cuda", "no CUDA engine"}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			var out bytes.Buffer
			err := run(context.Background(), noGroup{size: tc.tp}, testConfig(tc.args...), &out, runHooks{})
			var fe *FlagError
			switch {
			case err == nil:
				t.Fatal("no error")
			case strings.Contains(err.Error(), "\n"):
				t.Errorf("error of several lines: %q", err)
			case tc.flag != "" && (!errors.As(err, &fe) || fe.Flag != tc.flag || !errors.Is(err, ErrFlag)):
				t.Errorf("error %v, want a FlagError for --%s", err, tc.flag)
			case tc.flag == "" && !errors.Is(err, tp.ErrBackendUnavailable):
				t.Errorf("error %v, want tp.ErrBackendUnavailable", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if out.Len() != 0 {
				t.Errorf("printed %q before refusing", out.String())
			}
		})
	}
}

// noGroup fails every collective: the flag checks must not need one.
type noGroup struct{ size int }

var errNoGroup = errors.New("no collectives in this test")

func (g noGroup) Rank() int                                           { return 0 }
func (g noGroup) Size() int                                           { return g.size }
func (g noGroup) Barrier(context.Context) error                       { return errNoGroup }
func (g noGroup) AllGather(context.Context, []byte) ([][]byte, error) { return nil, errNoGroup }
func (g noGroup) AllGatherFDs(context.Context, int) ([]int, error)    { return nil, errNoGroup }
func (g noGroup) BroadcastFDs(context.Context, int, []int) ([]int, error) {
	return nil, errNoGroup
}

// TestInputsAgreeAcrossRanks: a weight row drawn alone equals the same row
// drawn in any other rank's shard, and the yardstick built shard by shard
// equals Expect over the full weight.
func TestInputsAgreeAcrossRanks(t *testing.T) {
	seed := time.Now().UnixNano()
	for _, size := range []int{1, 2, 3} {
		cfg := testConfig("--hidden", fmt.Sprint(16*size), "--latent", "24", "--m", "3,1", "--seed", fmt.Sprint(seed))
		p, err := newPlan(cfg, size)
		if err != nil {
			t.Fatal(err)
		}
		full := make([]kernel.BF16, cfg.Hidden*cfg.Latent)
		_ = p.fillWeight(context.Background(), full, 0)
		for r := range size {
			in, err := p.newInputs(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			shard := p.shape.Shard()
			if !slices.Equal(in.weight, full[r*shard*cfg.Latent:(r+1)*shard*cfg.Latent]) {
				t.Errorf("tp %d: rank %d's shard differs from its rows of the full weight", size, r)
			}
			want, err := kernel.Expect(kernel.Shape{M: p.rows, Hidden: cfg.Hidden, Latent: cfg.Latent, TP: 1}, in.latent, full, in.shared, cfg.Hidden)
			if err != nil {
				t.Fatal(err)
			}
			for i := range want.Ideal {
				if want.Ideal[i] != in.ideal[i] || want.Tol[i] != in.tol[i] {
					t.Fatalf("tp %d rank %d: element %d: ideal %v tol %v, want %v %v", size, r, i, in.ideal[i], in.tol[i], want.Ideal[i], want.Tol[i])
				}
			}
		}
	}
	// Other seeds, other weights.
	a, b := make([]kernel.BF16, 64), make([]kernel.BF16, 64)
	pa, _ := newPlan(testConfig("--hidden", "16", "--latent", "64", "--seed", "1"), 2)
	pb, _ := newPlan(testConfig("--hidden", "16", "--latent", "64", "--seed", "2"), 2)
	_ = pa.fillWeight(context.Background(), a, 3)
	_ = pb.fillWeight(context.Background(), b, 3)
	if slices.Equal(a, b) {
		t.Error("seeds 1 and 2 draw the same weight row")
	}
}

func TestPercentile(t *testing.T) {
	tests := []struct {
		desc string
		d    []time.Duration
		q    float64
		want time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one", []time.Duration{7}, 0.99, 7},
		{"median of four is the second", []time.Duration{4, 1, 3, 2}, 0.5, 2},
		{"p99 of 100 is the 99th", nil, 0.99, 99},
		{"p50 of 100 is the 50th", nil, 0.5, 50},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			d := tc.d
			if d == nil && tc.want != 0 {
				for _, v := range rand.Perm(100) {
					d = append(d, time.Duration(v+1))
				}
			}
			if got := percentile(d, tc.q); got != tc.want {
				t.Errorf("percentile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
}

// fakeGather hands AllGather the records of fixed other ranks.
type fakeGather struct {
	others [][]byte // rank 1.. records, replayed per call
	calls  int
	sizes  []int
}

func (f *fakeGather) Rank() int { return 0 }
func (f *fakeGather) AllGather(_ context.Context, b []byte) ([][]byte, error) {
	f.calls++
	f.sizes = append(f.sizes, len(b))
	return append([][]byte{b}, f.others...), nil
}

func TestGatherResults(t *testing.T) {
	// Enough steps for several calls; rank 1 replays rank 0's records, so
	// the ranks agree.
	n := 2*hashesPerCall + 17
	r := &mResult{wrong: 2, checked: 1000, worst: 0.5}
	for i := range n {
		r.times = append(r.times, time.Duration(i+1)*time.Microsecond)
		r.hashes = append(r.hashes, uint64(i)*0x9E3779B97F4A7C15)
	}
	echo := &echoGather{}
	all, err := gatherResults(context.Background(), echo, r)
	if err != nil {
		t.Fatal(err)
	}
	if echo.calls != 3 || len(all) != 2 || len(all[1].hashes) != n || all[1].wrong != 2 || all[1].checked != 1000 ||
		all[1].p50 != time.Duration((n+1)/2)*time.Microsecond || firstDifference(all) != "" {
		t.Errorf("calls %d, results %+v", echo.calls, all[1].rankResultHeader())
	}
	all[1].hashes[hashesPerCall+3]++
	if d := firstDifference(all); !strings.Contains(d, fmt.Sprintf("from step %d", hashesPerCall+3)) || !strings.Contains(d, "ranks 1 differ") {
		t.Errorf("firstDifference = %q", d)
	}

	// Malformed records from a peer are errors naming it, never panics.
	bad := [][]byte{nil, {1, 2, 3}, make([]byte, recordHeader+3)}
	for i, rec := range bad {
		_, err := gatherResults(context.Background(), &fakeGather{others: [][]byte{rec}}, &mResult{hashes: []uint64{1}})
		if !errors.Is(err, errRecord) || !strings.Contains(err.Error(), "rank 1") {
			t.Errorf("record %d: %v", i, err)
		}
	}
}

// echoGather plays a second rank that contributes what rank 0 does.
type echoGather struct{ calls int }

func (e *echoGather) Rank() int { return 0 }
func (e *echoGather) AllGather(_ context.Context, b []byte) ([][]byte, error) {
	e.calls++
	return [][]byte{b, append([]byte(nil), b...)}, nil
}

func (rr rankResult) rankResultHeader() string {
	return fmt.Sprintf("checked %d wrong %d p50 %v p99 %v hashes %d", rr.checked, rr.wrong, rr.p50, rr.p99, len(rr.hashes))
}

// TestHostBytes: the launcher's memory estimate is at least what a rank's
// inputs keep (newInputs; live heap after a collection) and at most 2.5
// times that (it adds a peer's weight shard, at most as large as the
// rank's own, a reference's temporaries, the block and the mailbox), for a
// few shapes; CheckHostMemory refuses exactly when the ranks' total is over
// what is available, and CheckMailbox names --slots.
func TestHostBytes(t *testing.T) {
	for _, tc := range []struct {
		tp, hidden, latent int
		m                  []int
	}{{2, 1024, 2048, []int{1, 8}}, {4, 4096, 512, []int{3}}, {1, 512, 4096, []int{1, 2, 4, 8}}, {1, 7168, 3584, []int{1}}, {8, 7168, 64, []int{8}}} {
		cfg := Default()
		cfg.Hidden, cfg.Latent, cfg.M = tc.hidden, tc.latent, tc.m
		p, err := newPlan(&cfg, tc.tp)
		if err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		in, err := p.newInputs(context.Background(), tc.tp-1)
		if err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(in)
		live, all := int64(after.HeapAlloc)-int64(before.HeapAlloc), int64(after.TotalAlloc-before.TotalAlloc)
		est := HostBytes(&cfg, tc.tp)
		t.Logf("tp %d hidden %d latent %d M %v: newInputs keeps %d bytes, allocates %d in all; estimate %d", tc.tp, tc.hidden, tc.latent, tc.m, live, all, est)
		if est < live || est > 5*live/2 {
			t.Errorf("tp %d hidden %d latent %d M %v: estimate %d bytes, not within %d..2.5×", tc.tp, tc.hidden, tc.latent, tc.m, est, live)
		}
		total := est * int64(tc.tp)
		if err := CheckHostMemory(&cfg, tc.tp, total); err != nil {
			t.Errorf("refused with exactly enough memory: %v", err)
		}
		if err := CheckHostMemory(&cfg, tc.tp, total-1); !errors.Is(err, ErrMemory) {
			t.Errorf("one byte short: got %v, want ErrMemory", err)
		}
	}
	// The per-step records count: --iters at its bound needs about 32 GB
	// a rank at tp 2, which no 16 GB machine has.
	cfg := Default()
	cfg.Iters = MaxIters
	if err := CheckHostMemory(&cfg, 2, 16<<30); !errors.Is(err, ErrMemory) || !strings.Contains(err.Error(), "--iters 1000000000") {
		t.Errorf("--iters %d on 16 GiB: got %v, want ErrMemory naming --iters", MaxIters, err)
	}
	cfg = Default()
	if err := CheckMailbox(&cfg, 2); err != nil {
		t.Errorf("default job: %v", err)
	}
	cfg.Slots = 100000
	var fe *FlagError
	if err := CheckMailbox(&cfg, 2); !errors.As(err, &fe) || fe.Flag != "slots" || !strings.Contains(fe.Rule, "limit") {
		t.Errorf("--slots 100000: got %v, want a FlagError on --slots naming the limit", err)
	}
	// Rows too large for even two slots: --hidden is to blame, not --slots.
	cfg = Default()
	cfg.Hidden = 100_000_000
	if err := CheckMailbox(&cfg, 2); !errors.As(err, &fe) || fe.Flag != "hidden" || !strings.Contains(fe.Rule, "limit") {
		t.Errorf("--hidden 100000000: got %v, want a FlagError on --hidden naming the limit", err)
	}
}

// TestRunProgress: rank 0 of a run longer than progressEvery says how far
// it has come, between the header and the rows, with the step count and
// an estimate of what is left; the other ranks print nothing.
func TestRunProgress(t *testing.T) {
	old := progressEvery
	progressEvery = time.Millisecond
	defer func() { progressEvery = old }()
	cfg := testConfig("--hidden", "1024", "--latent", "512", "--m", "1,2", "--iters", "400", "--backend", "cpu")
	errs, outs := onHubRanks(t, 2, func(ctx context.Context, g group, out *bytes.Buffer) error {
		return run(ctx, g, cfg, out, runHooks{die: func() error { return errors.New("no fault was asked for") }})
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("%v\nrank 0 said:\n%s", err, outs[0])
	}
	re := regexp.MustCompile(`(?m)^# (\d+) of 800 steps \(M=([12])\) in \d+s; about \d+s left$`)
	notes := re.FindAllStringSubmatch(outs[0], -1)
	if len(notes) == 0 {
		t.Fatalf("no progress line in:\n%s", outs[0])
	}
	prev := 0
	for _, n := range notes {
		done, _ := strconv.Atoi(n[1])
		if done <= prev || done >= 800 || (n[2] == "1") != (done <= 400) {
			t.Errorf("progress line %q after %d steps: out of order or naming the wrong M", n[0], prev)
		}
		prev = done
	}
	if outs[1] != "" {
		t.Errorf("rank 1 printed %q", outs[1])
	}
}

// TestNewInputsCancelled: drawing the inputs stops when ctx ends (at large
// shapes it takes minutes, and the launcher's SIGTERM must not wait for
// it): at once when it has ended already, and within 64 weight rows of it
// ending while a shard is drawn.
func TestNewInputsCancelled(t *testing.T) {
	cfg := Default()
	p, err := newPlan(&cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	in, err := p.newInputs(ctx, 0)
	if !errors.Is(err, context.Canceled) || in != nil || !strings.Contains(err.Error(), "job: rank 0: drawing the inputs") {
		t.Errorf("got %v, %v; want nil and a context.Canceled naming the phase", in, err)
	}
	// A ctx that ends at fillWeight's third look (rows 0, 64, 128).
	dst := make([]kernel.BF16, 300*cfg.Latent)
	ec := &endingCtx{Context: context.Background(), left: 2}
	if err := p.fillWeight(ec, dst, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("fillWeight: %v, want context.Canceled", err)
	}
	for r := range 300 {
		row := dst[r*cfg.Latent : (r+1)*cfg.Latent]
		if drawn := slices.ContainsFunc(row, func(v kernel.BF16) bool { return v != 0 }); drawn != (r < 128) {
			t.Fatalf("row %d drawn: %v; want rows 0..127 drawn and none after", r, drawn)
		}
	}
}

// endingCtx is a ctx whose Err is nil for its first left looks and
// context.Canceled after.
type endingCtx struct {
	context.Context
	left int
}

func (c *endingCtx) Err() error {
	if c.left > 0 {
		c.left--
		return nil
	}
	return context.Canceled
}

// TestReferenceInColumnChunks: the yardstick newInputs builds a few
// columns at a time equals kernel.Expect over each whole shard, bit for bit.
func TestReferenceInColumnChunks(t *testing.T) {
	cfg := Default()
	cfg.Hidden, cfg.Latent, cfg.M = 1024, 16384, []int{8} // 128 columns per call: 4 calls per shard
	p, err := newPlan(&cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	in, err := p.newInputs(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	H, K, shard := cfg.Hidden, cfg.Latent, p.shape.Shard()
	w := make([]kernel.BF16, shard*K)
	for q := range 2 {
		_ = p.fillWeight(context.Background(), w, q*shard)
		for r0 := 0; r0 < p.rows; r0 += kernel.MaxM {
			s := p.shape
			s.M = min(kernel.MaxM, p.rows-r0)
			e, err := kernel.Expect(s, in.latent[r0*K:], w, in.shared[r0*H+q*shard:], H)
			if err != nil {
				t.Fatal(err)
			}
			for m := range s.M {
				if !slices.Equal(in.ideal[(r0+m)*H+q*shard:][:shard], e.Ideal[m*shard:][:shard]) ||
					!slices.Equal(in.tol[(r0+m)*H+q*shard:][:shard], e.Tol[m*shard:][:shard]) {
					t.Fatalf("rank %d's columns, row %d: the chunked reference differs from the whole shard's", q, r0+m)
				}
			}
		}
	}
}

// TestTimeLeft: the rest of the current M at its pace, and each later M at
// that pace scaled by its rows.
func TestTimeLeft(t *testing.T) {
	// 100 of 1000 steps of M=1 in 1 s: 9 s for the rest of M=1, then 20 s
	// for M=2 and 80 s for M=8.
	if got, want := timeLeft(time.Second, 100, 1000, []int{1, 2, 8}), 109*time.Second; got != want {
		t.Errorf("got %v, want %v", got, want)
	}
	if got := timeLeft(time.Second, 1000, 1000, []int{4}); got != 0 {
		t.Errorf("the last step: got %v, want 0", got)
	}
}
