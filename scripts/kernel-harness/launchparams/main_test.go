package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tprun/tprun/internal/cuda"
	"github.com/tprun/tprun/kernel"
)

// The tests compare the answers with what Kernels.LaunchSkinny and
// LaunchReceive hand a recording driver. LaunchSkinny launches only the
// configs of the launch tables, so TestMain points the package at tables of
// random configs (every family, warps, cluster and hint) for these shapes.
var shapes = []kernel.Shape{
	{Hidden: 7168, Latent: 3584, TP: 2},
	{Hidden: 7168, Latent: 3584, TP: 8},
	{Hidden: 4096, Latent: 1024, TP: 4},
	{Hidden: 2880, Latent: 720, TP: 3},
	{Hidden: 600, Latent: 3600, TP: 3},
}

var seed = uint64(time.Now().UnixNano())

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "launchparams")
	if err == nil {
		err = writeTables(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// writeTables writes a launch table and a step table of random configs for
// every shape and M and names them in the environment.
func writeTables(dir string) error {
	spec, err := os.ReadFile(filepath.Join("..", "..", "..", "kernel", "families.tsv"))
	if err != nil {
		return err
	}
	var fams []string
	maxWarps := map[string]int{}
	for _, line := range strings.Split(string(spec), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 8 || strings.HasPrefix(line, "#") || f[0] == "family" || f[3] == "smem" { // skinny families only
			continue
		}
		fams = append(fams, f[0])
		if maxWarps[f[0]], err = strconv.Atoi(f[7]); err != nil {
			return err
		}
	}
	if len(fams) == 0 {
		return fmt.Errorf("no families in kernel/families.tsv")
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	for _, t := range []struct{ env, name string }{{kernel.ConfigTableEnv, "config.tsv"}, {kernel.StepTableEnv, "step.tsv"}} {
		var b strings.Builder
		fmt.Fprintln(&b, kernel.TableHeader)
		for _, s := range shapes {
			for m := 1; m <= kernel.MaxSkinnyM; m++ {
				fam := fams[rng.IntN(len(fams))]
				warps, cluster := 1+rng.IntN(maxWarps[fam]), 1+rng.IntN(kernel.MaxCluster)
				policy := 0
				if cluster > 1 {
					policy = rng.IntN(kernel.MaxClusterPolicy + 1)
				}
				pf := rng.IntN(64) | rng.IntN(17)<<16 | rng.IntN(4)<<24
				fmt.Fprintf(&b, "%d\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t1.0\n", s.Latent, s.Shard(), m, fam, warps, cluster, pf, policy, rng.IntN(kernel.MaxCarveout+1))
			}
		}
		path := filepath.Join(dir, t.name)
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			return err
		}
		os.Setenv(t.env, path)
	}
	return nil
}

// recorder is a kernel.KernelDriver that records launches.
type recorder struct {
	names    map[cuda.Function]string
	launches []recorded
}

type recorded struct {
	cfg    cuda.LaunchConfig
	name   string
	params []byte
}

func (d *recorder) ModuleLoadData([]byte) (cuda.Module, error) { return 1, nil }
func (d *recorder) ModuleUnload(cuda.Module) error             { return nil }
func (d *recorder) ModuleGetFunction(_ cuda.Module, name string) (cuda.Function, error) {
	f := cuda.Function(len(d.names) + 1)
	d.names[f] = name
	return f, nil
}
func (d *recorder) FuncSetAttribute(cuda.Function, cuda.FuncAttribute, int) error { return nil }

func (d *recorder) LaunchKernelEx(cfg cuda.LaunchConfig, f cuda.Function, params ...[]byte) error {
	d.launches = append(d.launches, recorded{cfg, d.names[f], slices.Concat(params...)})
	return nil
}

func load(t *testing.T) (*kernel.Kernels, *recorder) {
	t.Helper()
	d := &recorder{names: map[cuda.Function]string{}}
	k, err := kernel.Load(d)
	if err != nil {
		t.Fatalf("seed %d: Load: %v", seed, err)
	}
	t.Cleanup(func() { k.Close() })
	return k, d
}

// ask runs the requests through serve and returns the answer lines, split.
func ask(t *testing.T, requests string) [][]string {
	t.Helper()
	var out bytes.Buffer
	w := bufio.NewWriter(&out)
	if err := serve(bufio.NewReader(strings.NewReader(requests)), w); err != nil {
		t.Fatalf("serve: %v", err)
	}
	var rows [][]string
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		rows = append(rows, strings.Split(l, "\t"))
	}
	return rows
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	x, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("answer field %q: %v", s, err)
	}
	return x
}

func TestSkinnyIsWhatLaunchSkinnyLaunches(t *testing.T) {
	k, d := load(t)
	const base = cuda.DevicePtr(0x7f0000000000)
	for _, s := range shapes {
		for m := 1; m <= kernel.MaxSkinnyM; m++ {
			for _, recv := range []string{"none", "full", "skip"} {
				s.M = m
				shard, rank := s.Shard(), s.TP-1
				a := kernel.SkinnyArgs{Shape: s, Rank: rank, Latent: base, Weight: base + 0x1000000, WeightPacked: true,
					Shared: base + 0x2000000 + cuda.DevicePtr(2*rank*shard), SharedStride: s.Hidden,
					Dst: []cuda.DevicePtr{base + 0x3000000}}
				configFor, cols := kernel.ConfigFor, 0
				if recv != "none" {
					configFor, cols = kernel.StepConfigFor, s.Hidden
					r := &kernel.ReceiveArgs{M: m, Hidden: s.Hidden, Shard: shard, Slot: a.Dst[0], Out: base + 0x4000000,
						Status: base + 0x5000000, Timeout: time.Second}
					if recv == "skip" {
						r.SkipSlice, r.SkipRank, cols = true, rank, s.Hidden-shard
						a.Dst = append(a.Dst, r.Out)
					}
					a.Receive = r
				}
				c := configFor(m, shard, s.Latent)
				name := fmt.Sprintf("%v receive %s (%s/%d/%d)", s, recv, c.Family, c.Warps, c.Cluster)
				d.launches = nil
				if err := k.LaunchSkinny(7, a, true); err != nil || len(d.launches) != 1 {
					t.Fatalf("seed %d: %s: LaunchSkinny: %v, %d launches", seed, name, err, len(d.launches))
				}
				l := d.launches[0]
				ans := ask(t, fmt.Sprintf("skinny\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", m, shard, s.Latent, c.Family, c.Warps,
					c.Cluster, c.L2Prefetch, c.ClusterPolicy, c.Carveout, cols))
				if len(ans) != 1 || len(ans[0]) != 12 || ans[0][0] != "ok" {
					t.Fatalf("seed %d: %s: answer %q", seed, name, ans)
				}
				f := ans[0]
				carve := atoi(t, f[8])
				got := cuda.LaunchConfig{Grid: [3]uint32{uint32(atoi(t, f[3])), 1, 1}, Block: [3]uint32{uint32(atoi(t, f[4])), 1, 1},
					SharedMem: uint32(atoi(t, f[5])), Stream: 7, ProgrammaticSerialization: true,
					ClusterDim: [3]uint32{uint32(atoi(t, f[6])), 1, 1}, ClusterPolicy: cuda.ClusterSchedulingPolicy(atoi(t, f[7]))}
				if carve > 0 {
					got.SharedCarveout = cuda.Carveout(carve)
				}
				if got != l.cfg || f[1] != l.name || f[2] != l.name+kernel.RotationSuffix {
					t.Errorf("seed %d: %s: answer %q, LaunchSkinny launched %s with %+v", seed, name, f, l.name, l.cfg)
				}
				tileRows, pf := binary.LittleEndian.Uint32(l.params[176:]), binary.LittleEndian.Uint32(l.params[180:])
				if atoi(t, f[9]) != int(tileRows) || atoi(t, f[10]) != int(pf) {
					t.Errorf("seed %d: %s: answer tile rows %s, L2 prefetch %s; the launch's parameters %d, %d", seed, name, f[9], f[10], tileRows, pf)
				}
				if recvCTAs := atoi(t, f[11]); (recv == "none") != (recvCTAs == 0) || atoi(t, f[3]) != c.GridX+recvCTAs {
					t.Errorf("seed %d: %s: %d receive CTAs, grid %s, tiles' grid %d", seed, name, recvCTAs, f[3], c.GridX)
				}
			}
		}
	}
}

func TestReceiveIsWhatLaunchReceiveLaunches(t *testing.T) {
	k, d := load(t)
	rng := rand.New(rand.NewPCG(seed, 2))
	for range 50 {
		shard := 8 * (1 + rng.IntN(4096))
		tp := 1 + rng.IntN(kernel.MaxTP)
		m := 1 + rng.IntN(kernel.MaxSkinnyM)
		a := kernel.ReceiveArgs{M: m, Hidden: tp * shard, Shard: shard, Slot: 0x10000, Out: 0x20000, Status: 0x30000, Timeout: time.Second}
		d.launches = nil
		if err := k.LaunchReceive(3, a, true); err != nil || len(d.launches) != 1 {
			t.Fatalf("seed %d: LaunchReceive M=%d hidden=%d: %v, %d launches", seed, m, a.Hidden, err, len(d.launches))
		}
		l := d.launches[0]
		f := ask(t, fmt.Sprintf("receive\t%d\t%d\n", m, a.Hidden))[0]
		want := []string{"ok", l.name, l.name + kernel.RotationSuffix, fmt.Sprint(l.cfg.Grid[0]), fmt.Sprint(l.cfg.Block[0])}
		if !slices.Equal(f, want) || l.cfg.SharedMem != 0 || l.cfg.ClusterDim != [3]uint32{} {
			t.Errorf("seed %d: receive M=%d hidden=%d: answer %q, launched %q with %+v", seed, m, a.Hidden, f, want, l.cfg)
		}
	}
}

func TestPack(t *testing.T) {
	rng := rand.New(rand.NewPCG(seed, 3))
	for _, sz := range [][2]int{{16, 32}, {200, 3600}, {1 + rng.IntN(300), 1 + rng.IntN(700)}} {
		shard, latent := sz[0], sz[1]
		w := make([]kernel.BF16, shard*latent)
		for i := range w {
			w[i] = kernel.BF16FromFloat32(float32(rng.NormFloat64()))
		}
		var req bytes.Buffer
		fmt.Fprintf(&req, "packlen\t%d\t%d\npack\t%d\t%d\n", shard, latent, shard, latent)
		if err := writeBF16(&req, w); err != nil {
			t.Fatal(err)
		}
		req.WriteString("packlen\t1\t1\n") // the exchange goes on after the binary
		var out bytes.Buffer
		bw := bufio.NewWriter(&out)
		if err := serve(bufio.NewReader(&req), bw); err != nil {
			t.Fatalf("serve: %v", err)
		}
		r := bufio.NewReader(&out)
		n := kernel.PackedWeightLen(shard, latent)
		for i, want := range []string{fmt.Sprintf("ok\t%d\n", n), fmt.Sprintf("ok\t%d\n", n)} {
			if l, _ := r.ReadString('\n'); l != want {
				t.Fatalf("%d×%d: answer %d %q, want %q", shard, latent, i, l, want)
			}
		}
		p, err := readBF16(r, n)
		if err != nil {
			t.Fatalf("%d×%d: packed weight: %v", shard, latent, err)
		}
		back := make([]kernel.BF16, len(w))
		for i := range back {
			back[i] = 0xffff
		}
		if err := kernel.UnpackWeight(back, p, shard, latent); err != nil || !slices.Equal(back, w) {
			t.Errorf("seed %d: %d×%d: the packed answer does not unpack to the weight (%v)", seed, shard, latent, err)
		}
		if l, _ := r.ReadString('\n'); l != fmt.Sprintf("ok\t%d\n", kernel.PackedWeightLen(1, 1)) {
			t.Errorf("%d×%d: answer after the packed weight %q", shard, latent, l)
		}
	}
}

func TestRejects(t *testing.T) {
	// Refused by the kernel package: answered, and the next request read.
	for _, req := range []string{
		"skinny\t8\t896\t3584\tnosuchfamily\t4\t1\t0\t0\t0\t0",
		"skinny\t8\t896\t3584\td8p\t33\t1\t0\t0\t0\t0",
		"skinny\t8\t896\t3584\td8p\t4\t9\t0\t0\t0\t0",
		"skinny\t8\t896\t3584\td8p\t4\t1\t0\t2\t0\t0",
		"skinny\t9\t896\t3584\td8p\t4\t1\t0\t0\t0\t0",
		"skinny\t8\t897\t3584\td8p\t4\t1\t0\t0\t0\t0",
		"skinny\t8\t896\t3584\td8p\t4\t1\t0\t0\t101\t0",
		"skinny\t8\t896\t3584\td8p\t4\t1\t0\t0\t0\t7",
		"receive\t0\t7168",
		"packlen\t0\t8",
	} {
		ans := ask(t, req+"\npacklen\t16\t32\n")
		if len(ans) != 2 || ans[0][0] != "err" || len(ans[0]) != 2 || !slices.Equal(ans[1], []string{"ok", "512"}) {
			t.Errorf("%q: answers %q, want an err line, then the next answer", req, ans)
		}
	}
	// Unreadable: the exchange ends with an error.
	for _, req := range []string{"skinny\t8\t896", "what\t1", "packlen\tx\t1", "pack\t2\t2\n\x01\x02"} {
		var out bytes.Buffer
		if err := serve(bufio.NewReader(strings.NewReader(req+"\n")), bufio.NewWriter(&out)); err == nil {
			t.Errorf("%q: no error", req)
		}
	}
}
