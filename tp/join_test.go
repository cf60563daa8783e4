package tp

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tprun/tprun/internal/hub"
)

// Fake launch environments, one map per rank.

func srunEnv(tmp, job string, r, n int) map[string]string {
	return map[string]string{
		"SLURM_PROCID": strconv.Itoa(r), "SLURM_LOCALID": strconv.Itoa(r), "SLURM_NTASKS": strconv.Itoa(n),
		"SLURM_JOB_ID": job, "SLURM_STEP_ID": "0", "SLURM_NODEID": "0",
		"SLURM_STEP_TASKS_PER_NODE": strconv.Itoa(n), "SLURM_TASKS_PER_NODE": fmt.Sprintf("%d(x2)", n),
		"TMPDIR": tmp,
	}
}

func torchrunEnv(tmp, job string, r, n int) map[string]string {
	return map[string]string{
		"RANK": strconv.Itoa(r), "LOCAL_RANK": strconv.Itoa(r), "WORLD_SIZE": strconv.Itoa(n),
		"LOCAL_WORLD_SIZE": strconv.Itoa(n), "TORCHELASTIC_RUN_ID": job, "TORCHELASTIC_RESTART_COUNT": "0",
		"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "TMPDIR": tmp,
		// srun outside torchrun: the inner launcher's names win.
		"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0", "SLURM_JOB_ID": "77",
	}
}

func mpirunEnv(tmp, job string, r, n int) map[string]string {
	return map[string]string{
		"OMPI_COMM_WORLD_RANK": strconv.Itoa(r), "OMPI_COMM_WORLD_SIZE": strconv.Itoa(n),
		"OMPI_COMM_WORLD_LOCAL_RANK": strconv.Itoa(r), "OMPI_COMM_WORLD_LOCAL_SIZE": strconv.Itoa(n),
		"PMIX_NAMESPACE": job, "TMPDIR": tmp,
	}
}

func launcherEnv(path, token string, r, n int) map[string]string {
	return map[string]string{
		"TPRUN_HUB": path, "TPRUN_JOB_TOKEN": token,
		"TPRUN_RANK": strconv.Itoa(r), "TPRUN_WORLD_SIZE": strconv.Itoa(n), "TPRUN_LOCAL_RANK": strconv.Itoa(r),
		"RANK": strconv.Itoa(r), "WORLD_SIZE": strconv.Itoa(n), "LOCAL_RANK": strconv.Itoa(r), "LOCAL_WORLD_SIZE": strconv.Itoa(n),
	}
}

// shortTempDir is a t.TempDir substitute whose path leaves room for a
// socket name (t.TempDir embeds the test's name).
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tpt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func newJobID() string { return fmt.Sprintf("job-%x", rand.Uint64()) }

// withEnv returns env with some variables changed; "" deletes one.
func withEnv(env map[string]string, kv ...string) map[string]string {
	out := make(map[string]string, len(env))
	for k, v := range env {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(out, kv[i])
		} else {
			out[kv[i]] = kv[i+1]
		}
	}
	return out
}

func TestParseEnv(t *testing.T) {
	tmp := "/tmp/x"
	cases := []struct {
		desc string
		env  map[string]string
		want launch // compared when wantVar is empty
		// wantVar: the variable the error must name; wantText: a part of
		// its message.
		wantVar, wantText string
	}{
		{desc: "tprun launcher", env: withEnv(launcherEnv("/h/hub.sock", "tok", 2, 4), "TPRUN_DEVICES", "5,6,7,8"),
			want: launch{launcher: LauncherTprun, rank: 2, size: 4, localRank: 2, localSize: 4, devices: []int{5, 6, 7, 8}, hubPath: "/h/hub.sock", token: "tok"}},
		{desc: "tprun without torchrun names", env: withEnv(launcherEnv("/h", "t", 0, 1), "RANK", "", "WORLD_SIZE", "", "LOCAL_RANK", "", "LOCAL_WORLD_SIZE", ""),
			want: launch{launcher: LauncherTprun, rank: 0, size: 1, localRank: 0, localSize: 1, hubPath: "/h", token: "t"}},
		{desc: "tprun without token", env: withEnv(launcherEnv("/h", "t", 0, 2), "TPRUN_JOB_TOKEN", ""), wantVar: "TPRUN_JOB_TOKEN", wantText: "not set"},
		{desc: "tprun rank not a number", env: withEnv(launcherEnv("/h", "t", 0, 2), "TPRUN_RANK", "one"), wantVar: "TPRUN_RANK", wantText: "not a non-negative integer"},
		{desc: "tprun negative rank", env: withEnv(launcherEnv("/h", "t", 0, 2), "TPRUN_RANK", "-1"), wantVar: "TPRUN_RANK"},
		{desc: "tprun rank beyond size", env: withEnv(launcherEnv("/h", "t", 0, 2), "TPRUN_RANK", "2", "RANK", "2"), wantVar: "TPRUN_RANK", wantText: "not below TPRUN_WORLD_SIZE=2"},
		{desc: "tprun zero world", env: withEnv(launcherEnv("/h", "t", 0, 2), "TPRUN_WORLD_SIZE", "0", "WORLD_SIZE", ""), wantVar: "TPRUN_WORLD_SIZE"},
		{desc: "RANK contradicts TPRUN_RANK", env: withEnv(launcherEnv("/h", "t", 1, 2), "RANK", "0"), wantVar: "RANK", wantText: "contradicts TPRUN_RANK=1"},
		{desc: "too few devices", env: withEnv(launcherEnv("/h", "t", 0, 4), "TPRUN_DEVICES", "0,1"), wantVar: "TPRUN_DEVICES", wantText: "2 devices for 4 local ranks"},
		{desc: "bad device", env: withEnv(launcherEnv("/h", "t", 0, 2), "TPRUN_DEVICES", "0,gpu1"), wantVar: "TPRUN_DEVICES", wantText: "not a device index"},
		{desc: "local rank beyond local size", env: withEnv(launcherEnv("/h", "t", 3, 4), "LOCAL_WORLD_SIZE", "2"), wantVar: "TPRUN_LOCAL_RANK"},

		{desc: "srun", env: srunEnv(tmp, "123", 1, 4),
			want: launch{launcher: LauncherSrun, rank: 1, size: 4, localRank: 1, localSize: 4, jobID: "123.0"}},
		{desc: "srun with NTASKS_PER_NODE only", env: withEnv(srunEnv(tmp, "9", 0, 2), "SLURM_STEP_TASKS_PER_NODE", "", "SLURM_TASKS_PER_NODE", "", "SLURM_NTASKS_PER_NODE", "2", "SLURM_STEP_ID", ""),
			want: launch{launcher: LauncherSrun, rank: 0, size: 2, localRank: 0, localSize: 2, jobID: "9"}},
		{desc: "srun across nodes without a node list", env: withEnv(srunEnv(tmp, "1", 0, 8), "SLURM_STEP_TASKS_PER_NODE", "4(x2)"), wantVar: "SLURM_STEP_NODELIST", wantText: "no node list to find rank 0's node in; set TPRUN_RENDEZVOUS=host:port"},
		{desc: "srun node id beyond list", env: withEnv(srunEnv(tmp, "1", 0, 4), "SLURM_NODEID", "3"), wantVar: "SLURM_NODEID"},
		{desc: "srun bad tasks per node", env: withEnv(srunEnv(tmp, "1", 0, 4), "SLURM_STEP_TASKS_PER_NODE", "4(x"), wantVar: "SLURM_STEP_TASKS_PER_NODE"},
		{desc: "srun without job id", env: withEnv(srunEnv(tmp, "1", 0, 4), "SLURM_JOB_ID", ""), wantVar: "SLURM_JOB_ID", wantText: "not set"},
		{desc: "srun without ntasks", env: withEnv(srunEnv(tmp, "1", 0, 4), "SLURM_NTASKS", ""), wantVar: "SLURM_NTASKS"},

		{desc: "mpirun", env: mpirunEnv(tmp, "ns7", 2, 3),
			want: launch{launcher: LauncherMpirun, rank: 2, size: 3, localRank: 2, localSize: 3, jobID: "PMIX_NAMESPACE=ns7"}},
		{desc: "mpirun with orte job id", env: withEnv(mpirunEnv(tmp, "ns7", 0, 1), "OMPI_MCA_orte_ess_jobid", "42"),
			want: launch{launcher: LauncherMpirun, rank: 0, size: 1, localRank: 0, localSize: 1, jobID: "OMPI_MCA_orte_ess_jobid=42"}},
		{desc: "mpirun without job id", env: withEnv(mpirunEnv(tmp, "x", 0, 2), "PMIX_NAMESPACE", ""), wantVar: "OMPI_MCA_orte_ess_jobid", wantText: "nor PMIX_NAMESPACE"},
		{desc: "mpirun without local size", env: withEnv(mpirunEnv(tmp, "x", 0, 2), "OMPI_COMM_WORLD_LOCAL_SIZE", ""), wantVar: "OMPI_COMM_WORLD_LOCAL_SIZE"},

		{desc: "torchrun inside srun", env: torchrunEnv(tmp, "run1", 3, 4),
			want: launch{launcher: LauncherTorchrun, rank: 3, size: 4, localRank: 3, localSize: 4, jobID: "run1/0/127.0.0.1/29500"}},
		{desc: "torchrun without run id", env: withEnv(torchrunEnv(tmp, "r", 0, 2), "TORCHELASTIC_RUN_ID", "", "MASTER_PORT", ""), wantVar: "TORCHELASTIC_RUN_ID", wantText: "nor MASTER_PORT"},
		{desc: "torchrun without WORLD_SIZE", env: withEnv(torchrunEnv(tmp, "r", 0, 2), "WORLD_SIZE", ""), wantVar: "WORLD_SIZE", wantText: "not set"},

		{desc: "no launcher", env: map[string]string{"HOME": "/root"}, wantVar: "TPRUN_HUB", wantText: "not started by tprun, srun, mpirun or torchrun"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			var cfg joinConfig
			WithEnv(tc.env)(&cfg)
			got, err := parseEnv(cfg.lookup)
			if tc.wantVar == "" {
				if err != nil {
					t.Fatal(err)
				}
				if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", tc.want) {
					t.Errorf("got  %+v\nwant %+v", got, tc.want)
				}
				return
			}
			var ee *EnvError
			if !errors.As(err, &ee) || !errors.Is(err, ErrEnv) {
				t.Fatalf("got %v (%+v), want an *EnvError naming %s", err, got, tc.wantVar)
			}
			if ee.Var != tc.wantVar || !strings.Contains(err.Error(), tc.wantText) || !strings.Contains(err.Error(), tc.wantVar) {
				t.Errorf("got %q (variable %s), want variable %s and %q", err, ee.Var, tc.wantVar, tc.wantText)
			}
		})
	}
}

func TestParseTasksPerNode(t *testing.T) {
	cases := []struct {
		desc, in string
		want     []int
	}{
		{"one node", "8", []int{8}},
		{"repeated", "2(x3)", []int{2, 2, 2}},
		{"mixed", "2(x3),1,4(x2)", []int{2, 2, 2, 1, 4, 4}},
		{"empty", "", nil},
		{"zero", "0", nil},
		{"bad repeat", "2(xz)", nil},
		{"unclosed", "2(x3", nil},
		{"huge repeat", "1(x99999999)", nil},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			got, err := parseTasksPerNode(tc.in)
			if tc.want == nil {
				if err == nil {
					t.Errorf("parsed %q as %v, want an error", tc.in, got)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestHubPath(t *testing.T) {
	a, err := hubPath("/tmp/t", 1000, LauncherSrun, "1.0")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := hubPath("/tmp/t", 1000, LauncherSrun, "1.0")
	c, _ := hubPath("/tmp/t", 1000, LauncherSrun, "1.1")
	d, _ := hubPath("/tmp/t", 1000, LauncherMpirun, "1.0")
	if a != b {
		t.Errorf("same job, different paths: %s %s", a, b)
	}
	if a == c || a == d {
		t.Errorf("different jobs share %s", a)
	}
	if !strings.HasPrefix(a, "/tmp/t/tprun-1000/") || !strings.HasSuffix(a, ".sock") {
		t.Errorf("path %s", a)
	}
	long, err := hubPath("/"+strings.Repeat("d", 100), 1000, LauncherSrun, "1.0")
	if err != nil || len(long) > 107 || !strings.HasPrefix(long, "/tmp/tprun-1000/") {
		t.Errorf("long TMPDIR: %s, %v", long, err)
	}
	if _, err := hubPath("relative", 1000, LauncherSrun, "1"); !errors.Is(err, ErrEnv) {
		t.Errorf("relative TMPDIR: %v", err)
	}
	if jobToken(1000, LauncherSrun, "1") == jobToken(1001, LauncherSrun, "1") {
		t.Error("token does not depend on uid")
	}
}

// runRanks joins n goroutine ranks, each with its own environment, runs
// body on each and closes the groups. It returns each rank's error.
func runRanks(t *testing.T, n int, env func(r int) map[string]string, opts []JoinOption, body func(r int, g *Group) error) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			g, err := Join(ctx, append([]JoinOption{WithEnv(env(r))}, opts...)...)
			if err != nil {
				errs[r] = err
				return
			}
			err = body(r, g)
			errs[r] = errors.Join(err, g.Close())
		})
	}
	wg.Wait()
	return errs
}

func noErrors(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestJoinExternal joins goroutine ranks under fake srun, torchrun and
// mpirun environments: rank 0 hosts the hub, the others find it by job id.
func TestJoinExternal(t *testing.T) {
	cases := []struct {
		desc     string
		n        int
		launcher string
		env      func(tmp, job string, r, n int) map[string]string
	}{
		{"srun 4 ranks", 4, LauncherSrun, srunEnv},
		{"torchrun 3 ranks", 3, LauncherTorchrun, torchrunEnv},
		{"mpirun 2 ranks", 2, LauncherMpirun, mpirunEnv},
		{"srun 1 rank", 1, LauncherSrun, srunEnv},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			tmp, job := shortTempDir(t), newJobID()
			logs := make(chan string, 100)
			opts := []JoinOption{WithTimeout(10 * time.Second), WithLogf(func(f string, a ...any) {
				select {
				case logs <- fmt.Sprintf(f, a...):
				default:
				}
			})}
			errs := runRanks(t, tc.n, func(r int) map[string]string { return tc.env(tmp, job, r, tc.n) }, opts,
				func(r int, g *Group) error {
					if g.Rank() != r || g.Size() != tc.n || g.LocalRank() != r || g.LocalSize() != tc.n || g.Device() != r || g.Launcher() != tc.launcher {
						return fmt.Errorf("group says rank %d/%d local %d/%d device %d launcher %s",
							g.Rank(), g.Size(), g.LocalRank(), g.LocalSize(), g.Device(), g.Launcher())
					}
					if (g.srv != nil) != (r == 0) {
						return fmt.Errorf("hosts the hub: %v", g.srv != nil)
					}
					return exercise(context.Background(), g)
				})
			noErrors(t, errs)
			close(logs)
			for l := range logs {
				t.Errorf("hub logged on a clean run: %s", l)
			}
			dir := filepath.Join(tmp, fmt.Sprintf("tprun-%d", os.Getuid()))
			fi, err := os.Stat(dir)
			if err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("hub directory %s: %v %v", dir, fi, err)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("left behind in %s: %v", dir, ents)
			}
		})
	}
}

// TestJoinLauncher joins through a hub opened the way the launcher opens
// it, with the environment the launcher sets.
func TestJoinLauncher(t *testing.T) {
	const n = 3
	token := fmt.Sprintf("%x", rand.Uint64())
	srv, err := hub.Listen(hub.ServerConfig{WorldSize: n, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	}()
	devices := []int{7, 3, 5}
	errs := runRanks(t, n, func(r int) map[string]string {
		return withEnv(launcherEnv(srv.Path(), token, r, n), "TPRUN_DEVICES", "7,3,5")
	}, nil, func(r int, g *Group) error {
		if g.Rank() != r || g.Size() != n || g.Device() != devices[r] || g.Launcher() != LauncherTprun || g.srv != nil {
			return fmt.Errorf("group says rank %d/%d device %d launcher %s", g.Rank(), g.Size(), g.Device(), g.Launcher())
		}
		peers := g.Peers()
		if len(peers) != n || peers[r].Device != strconv.Itoa(devices[r]) || peers[r].PID != os.Getpid() {
			return fmt.Errorf("peers %+v", peers)
		}
		return exercise(context.Background(), g)
	})
	noErrors(t, errs)
	if err := srv.Err(); err != nil {
		t.Errorf("hub saw a failure: %v", err)
	}
}

func TestJoinErrors(t *testing.T) {
	ctx := context.Background()
	// No launcher at all.
	if _, err := Join(ctx, WithEnv(map[string]string{})); !errors.Is(err, ErrEnv) || !strings.Contains(err.Error(), "TPRUN_HUB") {
		t.Errorf("empty environment: %v", err)
	}
	// The launcher's socket is gone.
	gone := filepath.Join(shortTempDir(t), "hub.sock")
	_, err := Join(ctx, WithEnv(launcherEnv(gone, "t", 0, 1)))
	if !errors.Is(err, ErrEnv) || !strings.Contains(err.Error(), "TPRUN_HUB") {
		t.Errorf("missing socket: %v", err)
	}
	// A lookup function works like a map.
	env := srunEnv(shortTempDir(t), newJobID(), 0, 1)
	g, err := Join(ctx, WithLookupEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }), WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Error(err)
	}
	if err := g.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestJoinHostLate: ranks that start before rank 0 wait for its hub.
func TestJoinHostLate(t *testing.T) {
	const n = 3
	tmp, job := shortTempDir(t), newJobID()
	errs := runRanks(t, n, func(r int) map[string]string {
		if r == 0 {
			time.Sleep(150 * time.Millisecond)
		}
		return srunEnv(tmp, job, r, n)
	}, []JoinOption{WithTimeout(10 * time.Second)}, func(r int, g *Group) error {
		return g.Barrier(context.Background())
	})
	noErrors(t, errs)
}

// TestJoinRendezvousTimeout: a rank that never comes is named.
func TestJoinRendezvousTimeout(t *testing.T) {
	const n = 3
	tmp, job := shortTempDir(t), newJobID()
	errs := runRanks(t, 2, func(r int) map[string]string { return srunEnv(tmp, job, r, n) },
		[]JoinOption{WithTimeout(300 * time.Millisecond)}, func(int, *Group) error { return nil })
	for r, err := range errs {
		var rv *hub.RendezvousError
		if !errors.As(err, &rv) || !slices.Equal(rv.Missing, []int{2}) || !strings.Contains(err.Error(), "rank 2 never connected") {
			t.Errorf("rank %d: got %v, want a rendezvous error naming rank 2", r, err)
		}
	}
	// Rank 0 never comes: the others give up naming the hub's path.
	start := time.Now()
	errs = runRanks(t, 1, func(int) map[string]string { return srunEnv(tmp, newJobID(), 1, 2) },
		[]JoinOption{WithTimeout(100 * time.Millisecond)}, func(int, *Group) error { return nil })
	if err := errs[0]; err == nil || !strings.Contains(err.Error(), "rank 0 did not open the hub") {
		t.Errorf("without rank 0: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("gave up after %v", took)
	}
}
