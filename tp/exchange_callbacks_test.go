package tp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tprun/tprun/internal/cuda"
	"github.com/tprun/tprun/internal/cuda/cudatest"
	"github.com/tprun/tprun/internal/exchangetest"
	"github.com/tprun/tprun/mailbox"
)

// fixedCollectives is a framework's process group as ExternalGroup sees
// it: a fixed-size all-gather and a barrier, here over the in-process hub.
// It checks what a framework's fixed-size all-gather requires (the same n
// on every rank), and counts its calls.
type fixedCollectives struct {
	r     *exchangetest.Rank
	calls int
	fail  error // returned by every call when set
}

func (c *fixedCollectives) AllGather(ctx context.Context, in, out []byte) error {
	c.calls++
	if c.fail != nil {
		return c.fail
	}
	all, err := c.r.AllGather(ctx, in)
	if err != nil {
		return err
	}
	return concatGathered(out, in, all)
}

// concatGathered lays every rank's part of a variable-size all-gather
// (all) into out, as a fixed-size one (Collectives.AllGather) returns it:
// each part must be as long as this rank's, in.
func concatGathered(out, in []byte, all [][]byte) error {
	if len(out) != len(all)*len(in) {
		return fmt.Errorf("out has %d bytes for %d ranks of %d", len(out), len(all), len(in))
	}
	for q, b := range all {
		if len(b) != len(in) {
			return fmt.Errorf("rank %d passed %d bytes, this rank %d: a fixed-size all-gather needs the same n", q, len(b), len(in))
		}
		copy(out[q*len(in):], b)
	}
	return nil
}

func (c *fixedCollectives) Barrier(ctx context.Context) error {
	c.calls++
	if c.fail != nil {
		return c.fail
	}
	return c.r.Barrier(ctx)
}

// onExternalRanks makes an ExternalGroup for every rank of a fresh hub
// (rank r says it is claim(r)) and runs fn with it, each rank on its own
// goroutine; it returns the errors, index = rank. The ranks find
// themselves on this node, as NewExternalGroup sees it.
func onExternalRanks(size int, claim func(r int) int, fn func(r int, g *ExternalGroup) error) []error {
	return onExternalRanksAt(size, claim, nil, fn)
}

// onExternalRanksAt is onExternalRanks where rank r finds itself at
// site(r) (nil: where NewExternalGroup does).
func onExternalRanksAt(size int, claim func(r int) int, site func(r int) externalSite, fn func(r int, g *ExternalGroup) error) []error {
	return exchangetest.Run(size, func(r int, ex *exchangetest.Rank) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c := &fixedCollectives{r: ex}
		var g *ExternalGroup
		var err error
		if site == nil {
			g, err = NewExternalGroup(ctx, claim(r), size, r%2, r%2, c)
		} else {
			g, err = newExternalGroup(ctx, claim(r), size, r%2, r%2, c, site(r))
		}
		if err != nil {
			return err
		}
		defer g.Close()
		return fn(r, g)
	})
}

// apart puts every rank on a node of its own (odd ranks on "node-b" with
// no identity at all, as a rank that could not read its own): the group
// spans nodes.
func apart(r int) externalSite {
	if r%2 == 1 {
		return externalSite{host: "node-b", timeout: time.Minute}
	}
	return externalSite{host: "node-a", node: "node-a boot net", timeout: time.Minute}
}

// split puts rank 0 on one node and the others on another, both known.
func split(r int) externalSite {
	if r == 0 {
		return externalSite{host: "node-a", node: "node-a boot net", timeout: time.Minute}
	}
	return externalSite{host: "node-b", node: "node-b boot net", timeout: time.Minute}
}

func same(r int) int { return r }

// TestExternalGroupCollectives: contributions of random lengths (empty
// ones included) come back whole and in rank order on every rank, however
// the lengths differ, through a fixed-size all-gather only.
func TestExternalGroupCollectives(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	for _, size := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprintf("size%d", size), func(t *testing.T) {
			const rounds = 20
			// want[round][rank]: fresh bytes, some rounds with empty ones.
			rng := rand.New(rand.NewPCG(seed, uint64(size)))
			want := make([][][]byte, rounds)
			for i := range want {
				want[i] = make([][]byte, size)
				for r := range want[i] {
					n := rng.IntN(3000)
					if rng.IntN(4) == 0 {
						n = 0
					}
					want[i][r] = make([]byte, n)
					for k := range want[i][r] {
						want[i][r][k] = byte(rng.Uint32())
					}
				}
			}
			errs := onExternalRanks(size, same, func(r int, g *ExternalGroup) error {
				ctx := context.Background()
				if g.Rank() != r || g.Size() != size || g.SpansNodes() || g.Device() != r%2 {
					return fmt.Errorf("rank %d, size %d, spans %v, device %d", g.Rank(), g.Size(), g.SpansNodes(), g.Device())
				}
				for q, p := range g.Peers() {
					if p.Rank != q || p.WorldSize != size || p.PID != os.Getpid() || p.Device != fmt.Sprint(q%2) {
						return fmt.Errorf("peer %d: %+v", q, p)
					}
				}
				for i := range rounds {
					got, err := g.AllGather(ctx, want[i][r])
					if err != nil {
						return fmt.Errorf("round %d: %w", i, err)
					}
					for q := range size {
						if !bytes.Equal(got[q], want[i][q]) || (len(want[i][q]) == 0) != (got[q] == nil) {
							return fmt.Errorf("round %d: rank %d's %d bytes came back as %d bytes, not equal", i, q, len(want[i][q]), len(got[q]))
						}
					}
					if err := g.Barrier(ctx); err != nil {
						return fmt.Errorf("round %d: barrier: %w", i, err)
					}
				}
				return nil
			})
			noErrors(t, errs)
		})
	}
}

// TestExternalGroupRefusals: what this route cannot do fails with an error
// that says why and what to use instead, on every rank, and leaves the
// group usable where the ranks failed together.
func TestExternalGroupRefusals(t *testing.T) {
	for _, tc := range []struct {
		desc string
		site func(r int) externalSite
	}{
		{"across nodes: descriptors and the host backend", split},
		{"a rank without a node identity: descriptors and the host backend", apart},
	} {
		t.Run(tc.desc, func(t *testing.T) { refusedAcrossNodes(t, tc.site) })
	}
	t.Run("forced node", func(t *testing.T) {
		t.Setenv(EnvForceNode, "node-x")
		refusedAcrossNodes(t, nil)
	})
	t.Run("a contribution over the limit", func(t *testing.T) {
		errs := onExternalRanks(3, same, func(r int, g *ExternalGroup) error {
			ctx := context.Background()
			b := []byte{1}
			if r == 2 {
				b = make([]byte, MaxBlob(3)+1)
			}
			_, err := g.AllGather(ctx, b)
			if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), fmt.Sprintf("rank 2 contributed %d bytes", MaxBlob(3)+1)) {
				return fmt.Errorf("oversized: %v", err)
			}
			if _, err := g.AllGather(ctx, []byte("again")); err != nil {
				return fmt.Errorf("after the oversized one: %w", err)
			}
			return nil
		})
		noErrors(t, errs)
	})
	t.Run("two ranks claim rank 0", func(t *testing.T) {
		errs := onExternalRanks(3, func(r int) int { return r &^ 1 }, func(int, *ExternalGroup) error { return nil })
		for r, err := range errs {
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "the process at place 1 of the framework's all-gather") ||
				!strings.Contains(err.Error(), "says it is rank 0") {
				t.Errorf("rank %d: %v", r, err)
			}
		}
	})
	t.Run("bad arguments", func(t *testing.T) {
		c := &fixedCollectives{}
		for _, a := range [][4]int{{2, 2, 0, 0}, {-1, 2, 0, 0}, {0, 0, 0, 0}, {0, 2, -1, 0}, {0, 2, 0, -1}} {
			if _, err := NewExternalGroup(context.Background(), a[0], a[1], a[2], a[3], c); !errors.Is(err, ErrArgument) {
				t.Errorf("rank %d size %d local %d device %d: %v", a[0], a[1], a[2], a[3], err)
			}
		}
		if c.calls != 0 {
			t.Errorf("%d collectives called for bad arguments", c.calls)
		}
	})
}

// TestExternalGroupFailures: a framework collective that fails is named,
// and the group refuses later collectives without calling the framework
// again; Abort and Close likewise.
func TestExternalGroupFailures(t *testing.T) {
	ctx := context.Background()
	c := &fixedCollectives{r: exchangetest.NewHub(1).Rank(0)}
	g, err := NewExternalGroup(ctx, 0, 1, 0, 0, c)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	cause := errors.New("connection reset by the framework's peer")
	c.fail = cause
	_, err = g.AllGather(ctx, []byte("x"))
	var ee *ExternalCollectiveError
	if !errors.As(err, &ee) || ee.Collective != "AllGather" || !errors.Is(err, cause) || !errors.Is(err, ErrAborted) {
		t.Fatalf("failing all-gather: %v", err)
	}
	calls := c.calls
	if err := g.Barrier(ctx); !errors.Is(err, ErrExternalCollective) || !strings.Contains(err.Error(), "unusable") {
		t.Errorf("barrier after the failure: %v", err)
	}
	if c.calls != calls {
		t.Errorf("the framework was called again after its failure")
	}

	c2 := &fixedCollectives{r: exchangetest.NewHub(1).Rank(0)}
	g2, err := NewExternalGroup(ctx, 0, 1, 0, 0, c2)
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Close()
	if err := g2.Abort("weights did not load"); err != nil {
		t.Fatal(err)
	}
	if err := g2.Barrier(ctx); !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "weights did not load") {
		t.Errorf("barrier after Abort: %v", err)
	}
	g3, err := NewExternalGroup(ctx, 0, 1, 0, 0, &fixedCollectives{r: exchangetest.NewHub(1).Rank(0)})
	if err != nil {
		t.Fatal(err)
	}
	_ = g3.Close()
	if _, err := g3.AllGather(ctx, nil); !errors.Is(err, ErrGroupClosed) {
		t.Errorf("all-gather after Close: %v", err)
	}
}

// TestExternalGroupFabricMailbox: the GPU mailbox set up through the
// framework's collectives on one node shares POSIX descriptor handles over
// the node's sockets, no fabric needed, as under Join; when the ranks span
// nodes it shares FABRIC handles (the fake driver's fabric is a directory
// of files), and without a fabric (no IMEX channel) every rank fails
// setup with the refusal that names what the administrator must provide.
func TestExternalGroupFabricMailbox(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the fake driver")
	}
	drv := fakeCUDADriver(t)
	for _, tc := range []struct {
		desc   string
		site   func(r int) externalSite
		fabric bool
		want   cuda.HandleType // 0: every rank refused with a *FabricError
	}{
		{desc: "one node, no fabric", want: cuda.HandleTypePOSIXFD},
		{desc: "across nodes, fabric", site: split, fabric: true, want: cuda.HandleTypeFabric},
		{desc: "across nodes, no fabric", site: split},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			dir := t.TempDir()
			if tc.fabric {
				t.Setenv(cudatest.FabricDirEnv, dir)
			} else {
				t.Setenv(cudatest.FabricDirEnv, "")
				os.Unsetenv(cudatest.FabricDirEnv)
			}
			before := openFDs(t)
			var mu sync.Mutex
			var peers [][]cuda.DevicePtr
			errs := onExternalRanksAt(2, same, tc.site, func(r int, g *ExternalGroup) error {
				ctx := context.Background()
				u, err := mailbox.NewUnicast(ctx, g, drv, cuda.Device(r), mailbox.Config{Hidden: 64, Capacity: 2})
				if err != nil {
					return err
				}
				defer u.Close()
				if u.HandleType() != tc.want {
					return fmt.Errorf("handle type %v, want %v", u.HandleType(), tc.want)
				}
				if ents, err := os.ReadDir(dir); tc.fabric && (err != nil || len(ents) == 0) {
					return fmt.Errorf("no fabric allocation in %s while the mailbox is open (%v)", dir, err)
				}
				mu.Lock()
				peers = append(peers, u.Peers())
				mu.Unlock()
				return g.Barrier(ctx)
			})
			refused := 0
			for r, err := range errs {
				var fe *mailbox.FabricError
				switch {
				case tc.want != 0 && err != nil:
					t.Errorf("rank %d: %v", r, err)
				case tc.want == 0 && err == nil:
					t.Errorf("rank %d: setup worked without a fabric", r)
				case tc.want == 0 && errors.As(err, &fe):
					refused++
					if !strings.Contains(err.Error(), "/dev/nvidia-caps-imex-channels/channel0") {
						t.Errorf("rank %d: the refusal does not say what the administrator must provide: %v", r, err)
					}
				}
			}
			if tc.want == 0 && refused == 0 {
				t.Errorf("no rank refused with a *FabricError: %v", errs)
			}
			if tc.want != 0 && len(peers) != 2 {
				t.Errorf("%d ranks mapped the mailboxes", len(peers))
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("fabric allocations left: %d", len(ents))
			}
			sameFDs(t, before)
		})
	}
}

// refusedAcrossNodes: ranks that span nodes refuse the descriptor
// collectives and the host backend, say so, and go on.
func refusedAcrossNodes(t *testing.T, site func(r int) externalSite) {
	errs := onExternalRanksAt(2, same, site, func(r int, g *ExternalGroup) error {
		ctx := context.Background()
		if !g.SpansNodes() {
			return errors.New("the group says it is on one node")
		}
		if _, err := g.AllGatherFDs(ctx, 0); !errors.Is(err, ErrCrossNode) || !strings.Contains(err.Error(), "descriptors cannot travel through the framework's collectives") {
			return fmt.Errorf("AllGatherFDs: %v", err)
		}
		if _, err := g.BroadcastFDs(ctx, 0, []int{0}); !errors.Is(err, ErrCrossNode) {
			return fmt.Errorf("BroadcastFDs: %v", err)
		}
		_, err := g.NewUpProjection(ctx, 16, 8, 2, WithBackend(BackendHost))
		// The ranks say different hosts (split, apart) and Resolve refuses
		// the host backend; or they say one host (forced) and the
		// descriptor collective refuses it.
		if !errors.Is(err, ErrBackendUnavailable) || (!strings.Contains(err.Error(), "the host backend cannot run on this route") &&
			!strings.Contains(err.Error(), "the ranks run on 2 nodes")) {
			return fmt.Errorf("host op: %v", err)
		}
		// Every rank failed in the same place: the group goes on.
		got, err := g.AllGather(ctx, []byte{byte(r + 1)})
		if err != nil || len(got) != 2 || got[1-r][0] != byte(2-r) {
			return fmt.Errorf("all-gather after the refusal: %v %v", got, err)
		}
		return nil
	})
	noErrors(t, errs)
}

// TestExternalGroupFabricRefusalSaysWhy: when the ranks of an
// ExternalGroup count as separate nodes and the GPU mailbox's fabric
// handles are refused, the op's error says which rank keeps the group off
// one node and why, besides the refusal itself; a group on one node, or
// an error that is no fabric refusal, is left as it is.
func TestExternalGroupFabricRefusalSaysWhy(t *testing.T) {
	refusal := &mailbox.FabricError{Device: 0, Op: "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED"}
	other := fmt.Errorf("%w: no memory", mailbox.ErrConfig)
	for _, tc := range []struct {
		desc string
		site func(r int) externalSite
		fail error
		why  bool // the error names the split
	}{
		{desc: "separate nodes, fabric refused", site: split, fail: refusal, why: true},
		{desc: "separate nodes, another error", site: split, fail: other},
		{desc: "one node, fabric refused", fail: refusal},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			deps := fakeDeps()
			deps.newUnicast = func(context.Context, mailbox.Exchanger, engineDriver, cuda.Device, mailbox.Config) (gpuMailbox, []cuda.DevicePtr, error) {
				return nil, nil, tc.fail
			}
			gpu := newFakeGPU()
			errs := onExternalRanksAt(2, same, tc.site, func(r int, g *ExternalGroup) error {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				u, err := newFakeUpKind(ctx, g, gpu, 64, 40, 4, 0, 5*time.Second, mailbox.KindUnicast, deps)
				if err == nil {
					u.Close()
					return errors.New("the op was made")
				}
				if !errors.Is(err, tc.fail) {
					return fmt.Errorf("%v, want %v wrapped", err, tc.fail)
				}
				named := strings.Contains(err.Error(), "counts its ranks as separate nodes") &&
					strings.Contains(err.Error(), fmt.Sprintf("rank %d", 1-r))
				if named != tc.why {
					return fmt.Errorf("names the split: %v, want %v: %v", named, tc.why, err)
				}
				t.Logf("rank %d: %v", r, err)
				return nil
			})
			noErrors(t, errs)
		})
	}
}
