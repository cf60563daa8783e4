package tp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tprun/tprun/mailbox"
)

// withListener hands rank 0 a listener the test opened, so that the test
// knows the address before any rank starts and no port is picked by
// listening and closing.
func withListener(ln net.Listener) JoinOption { return func(c *joinConfig) { c.listener = ln } }

func randomSecret(t testing.TB) string {
	t.Helper()
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func TestExpandHostlist(t *testing.T) {
	cases := []struct {
		in   string
		want []string
		err  string
	}{
		{in: "gpu07", want: []string{"gpu07"}},
		{in: "gpu[07-09,11],login1", want: []string{"gpu07", "gpu08", "gpu09", "gpu11", "login1"}},
		{in: "n[8-10]", want: []string{"n8", "n9", "n10"}},
		{in: "r[1-2]n[01-02]x", want: []string{"r1n01x", "r1n02x", "r2n01x", "r2n02x"}},
		{in: "a, b ,c", want: []string{"a", "b", "c"}},
		{in: "gpu[3-1]", err: "not a number or a lo-hi range"},
		{in: "gpu[1-2", err: "unbalanced"},
		{in: "gpu]1[", err: "unbalanced"},
		{in: "g[[1]]", err: "nested"},
		{in: "n[0-99999999]", err: "more than 65536 hosts"},
		{in: " , ", err: "names no host"},
	}
	for _, tc := range cases {
		got, err := expandHostlist(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: got %v, %v; want an error saying %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q: got %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// TestParseEnvCrossNode: where the TCP rendezvous is and where each rank
// should be, per launcher.
func TestParseEnvCrossNode(t *testing.T) {
	srun2 := func(r int) map[string]string {
		return withEnv(srunEnv("/tmp", "4711", r, 8), "SLURM_STEP_TASKS_PER_NODE", "4(x2)", "SLURM_LOCALID", strconv.Itoa(r%4),
			"SLURM_NODEID", strconv.Itoa(r/4), "SLURM_STEP_NODELIST", "gpu[07-08]")
	}
	torch2 := func(r int) map[string]string {
		return withEnv(torchrunEnv("/tmp", "run9", r, 4), "LOCAL_WORLD_SIZE", "2", "LOCAL_RANK", strconv.Itoa(r%2), "MASTER_ADDR", "10.1.2.3")
	}
	mpi2 := func(r int) map[string]string {
		return withEnv(mpirunEnv("/tmp", "ns", r, 4), "OMPI_COMM_WORLD_LOCAL_SIZE", "2", "OMPI_COMM_WORLD_LOCAL_RANK", strconv.Itoa(r%2))
	}
	cases := []struct {
		desc     string
		env      map[string]string
		cross    bool
		addr     string // "" with cross: any port on the expected host
		from     string
		hosts    map[int]string
		wantVar  string
		wantText string
	}{
		{desc: "srun on one node", env: srunEnv("/tmp", "1", 0, 4)},
		{desc: "srun, two nodes", env: srun2(5), cross: true, addr: "gpu07:", from: "SLURM_STEP_NODELIST's first node and a port derived from the Slurm job id",
			hosts: map[int]string{0: "gpu07", 3: "gpu07", 4: "gpu08", 7: "gpu08"}},
		{desc: "srun, two nodes, port given", env: withEnv(srun2(0), EnvRendezvous, ":31000"), cross: true, addr: "gpu07:31000",
			from: "SLURM_STEP_NODELIST's first node and TPRUN_RENDEZVOUS's port"},
		{desc: "srun, cyclic: placement unknown", env: withEnv(srun2(1), "SLURM_DISTRIBUTION", "cyclic"), cross: true, addr: "gpu07:", hosts: map[int]string{}},
		{desc: "srun, rank 0 not on the first node", env: withEnv(srun2(0), "SLURM_NODEID", "1"), wantVar: "SLURM_NODEID",
			wantText: "rank 0 runs on node 1 of SLURM_STEP_NODELIST, not on its first node gpu07"},
		{desc: "srun, bad node list", env: withEnv(srun2(1), "SLURM_STEP_NODELIST", "gpu[1-"), wantVar: "SLURM_STEP_NODELIST", wantText: "unbalanced"},
		{desc: "torchrun, two nodes", env: torch2(3), cross: true, addr: "10.1.2.3:29501", from: "MASTER_ADDR and MASTER_PORT+1",
			hosts: map[int]string{1: "10.1.2.3", 2: "torchrun node 1"}},
		{desc: "torchrun, rendezvous given", env: withEnv(torch2(2), EnvRendezvous, "[::1]:29600"), cross: true, addr: "[::1]:29600", from: "TPRUN_RENDEZVOUS"},
		{desc: "torchrun, last port", env: withEnv(torch2(2), "MASTER_PORT", "65535"), wantVar: "MASTER_PORT", wantText: "the rendezvous uses MASTER_PORT+1"},
		{desc: "mpirun across nodes needs the address", env: mpi2(1), wantVar: EnvRendezvous, wantText: "mpirun -x TPRUN_RENDEZVOUS"},
		{desc: "mpirun across nodes", env: withEnv(mpi2(1), EnvRendezvous, "head:29600"), cross: true, addr: "head:29600", from: "TPRUN_RENDEZVOUS"},
		{desc: "bad address", env: withEnv(torch2(0), EnvRendezvous, "head"), wantVar: EnvRendezvous, wantText: "not host:port"},
		{desc: "port zero", env: withEnv(torch2(0), EnvRendezvous, "head:0"), wantVar: EnvRendezvous},
		{desc: "port too big", env: withEnv(torch2(0), EnvRendezvous, "head:70000"), wantVar: EnvRendezvous},
		{desc: "forced node on one node", env: withEnv(torchrunEnv("/tmp", "r", 1, 2), EnvForceNode, "node-b"), cross: true, addr: "127.0.0.1:29501"},
		{desc: "forced node under the tprun launcher", env: withEnv(launcherEnv("/h", "t", 0, 2), EnvForceNode, "x"), wantVar: EnvForceNode, wantText: "the tprun launcher runs every rank on its own node"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			var cfg joinConfig
			WithEnv(tc.env)(&cfg)
			l, err := parseEnv(cfg.lookup)
			if tc.wantVar != "" {
				var ee *EnvError
				if !errors.As(err, &ee) || ee.Var != tc.wantVar || !strings.Contains(err.Error(), tc.wantText) {
					t.Fatalf("got %v, want an *EnvError naming %s saying %q", err, tc.wantVar, tc.wantText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if l.cross != tc.cross {
				t.Fatalf("cross = %v, want %v", l.cross, tc.cross)
			}
			if !tc.cross {
				return
			}
			if strings.HasSuffix(tc.addr, ":") {
				host, port, _ := net.SplitHostPort(l.rendezvous)
				p, _ := strconv.Atoi(port)
				if host+":" != tc.addr || p < srunPortBase || p >= srunPortBase+srunPorts {
					t.Errorf("rendezvous %s, want %sPORT in [%d,%d)", l.rendezvous, tc.addr, srunPortBase, srunPortBase+srunPorts)
				}
			} else if l.rendezvous != tc.addr {
				t.Errorf("rendezvous %s, want %s", l.rendezvous, tc.addr)
			}
			if tc.from != "" && l.rendezvousFrom != tc.from {
				t.Errorf("from %q, want %q", l.rendezvousFrom, tc.from)
			}
			if tc.hosts != nil && len(tc.hosts) == 0 && l.hostOf != nil {
				t.Errorf("placement known: rank 1 on %q", l.hostOf(1))
			}
			for r, h := range tc.hosts {
				if l.hostOf == nil || l.hostOf(r) != h {
					t.Errorf("rank %d expected on %q", r, h)
				}
			}
		})
	}
	// Every rank of one srun job derives the same port; another job
	// another one (with this pair of ids).
	a, _ := parseEnv(WithEnvLookup(srun2(0)))
	b, _ := parseEnv(WithEnvLookup(srun2(7)))
	c, _ := parseEnv(WithEnvLookup(withEnv(srun2(0), "SLURM_JOB_ID", "4712")))
	if a.rendezvous != b.rendezvous || a.rendezvous == c.rendezvous {
		t.Errorf("ports: job 4711 ranks 0 and 7 %s %s, job 4712 %s", a.rendezvous, b.rendezvous, c.rendezvous)
	}
}

// WithEnvLookup is the lookup WithEnv makes, for parseEnv in tests.
func WithEnvLookup(env map[string]string) func(string) (string, bool) {
	var cfg joinConfig
	WithEnv(env)(&cfg)
	return cfg.lookup
}

func TestJobSecret(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := randomSecret(t)
	cases := []struct {
		desc    string
		env     map[string]string
		want    string
		wantErr string
	}{
		{"from the environment", map[string]string{EnvJobSecret: " " + good + "\n"}, good, ""},
		{"from a private file", map[string]string{EnvJobSecretFile: file("ok", good+"\n", 0o600)}, good, ""},
		{"from a read-only file", map[string]string{EnvJobSecretFile: file("ro", good, 0o400)}, good, ""},
		{"none", map[string]string{}, "", "TPRUN_JOB_SECRET: not set, nor TPRUN_JOB_SECRET_FILE: the ranks of this job (2 nodes) meet over TCP"},
		{"both", map[string]string{EnvJobSecret: good, EnvJobSecretFile: file("both", good, 0o600)}, "", "set one of them"},
		{"short", map[string]string{EnvJobSecret: "0123456789"}, "", "the job secret has 10 bytes; at least 16"},
		{"file others can read", map[string]string{EnvJobSecretFile: file("open", good, 0o644)}, "", "lets others read or write it; chmod 600 it"},
		{"missing file", map[string]string{EnvJobSecretFile: filepath.Join(dir, "nope")}, "", "no such file"},
		{"a directory", map[string]string{EnvJobSecretFile: dir}, "", "not a regular file"},
		{"huge file", map[string]string{EnvJobSecretFile: file("huge", strings.Repeat("x", maxSecretFile+1), 0o600)}, "", "larger than"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			got, err := jobSecret(WithEnvLookup(tc.env), "2 nodes")
			if tc.wantErr != "" {
				if !errors.Is(err, ErrEnv) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %q, %v; want an EnvError saying %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Errorf("got %q, %v", got, err)
			}
		})
	}
}

// crossEnv is the environment of rank r of n on nodes "node-a", "node-b",
// ... (perNode ranks each), forced into a job across nodes on this machine
// (torchrun's names), meeting at addr.
func crossEnv(addr, secret string, r, n, perNode int) map[string]string {
	env := torchrunEnv("/tmp", "cross", r, n)
	return withEnv(env, "LOCAL_WORLD_SIZE", strconv.Itoa(perNode), "LOCAL_RANK", strconv.Itoa(r%perNode),
		EnvForceNode, fmt.Sprintf("node-%c", 'a'+r/perNode), EnvRendezvous, addr, EnvJobSecret, secret)
}

// loopback opens the listener rank 0 will serve on.
func loopback(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// TestJoinTCP: two and four "nodes" on this machine join over the
// loopback with a job secret and run the collectives; descriptors are
// refused, and the group goes on.
func TestJoinTCP(t *testing.T) {
	for _, tc := range []struct{ n, perNode int }{{4, 2}, {4, 1}, {6, 3}} {
		t.Run(fmt.Sprintf("%d ranks on %d nodes", tc.n, tc.n/tc.perNode), func(t *testing.T) {
			ln, secret := loopback(t), randomSecret(t)
			blobs := make([][]byte, tc.n)
			for r := range blobs {
				blobs[r] = make([]byte, 1+mrand.IntN(300))
				_, _ = rand.Read(blobs[r])
			}
			errs := runRanks(t, tc.n, func(r int) map[string]string { return crossEnv(ln.Addr().String(), secret, r, tc.n, tc.perNode) },
				[]JoinOption{withListener(ln), WithTimeout(10 * time.Second)}, func(r int, g *Group) error {
					if !g.SpansNodes() || g.Rank() != r || g.LocalSize() != tc.perNode {
						return fmt.Errorf("group: spans %v rank %d local size %d", g.SpansNodes(), g.Rank(), g.LocalSize())
					}
					for q, p := range g.Peers() {
						if want := fmt.Sprintf("node-%c", 'a'+q/tc.perNode); p.Hostname != want {
							return fmt.Errorf("peer %d on %q, want %q", q, p.Hostname, want)
						}
					}
					got, err := g.AllGather(context.Background(), blobs[r])
					if err != nil {
						return err
					}
					for q := range got {
						if !bytes.Equal(got[q], blobs[q]) {
							return fmt.Errorf("rank %d's blob differs", q)
						}
					}
					if _, err := g.AllGatherFDs(context.Background(), 0); !errors.Is(err, ErrCrossNode) {
						return fmt.Errorf("AllGatherFDs: %v, want ErrCrossNode", err)
					}
					return exerciseBlobs(g)
				})
			noErrors(t, errs)
		})
	}
}

// exerciseBlobs runs a barrier and a broadcast.
func exerciseBlobs(g *Group) error {
	ctx := context.Background()
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	root := g.Size() - 1
	b, err := g.Broadcast(ctx, root, []byte(fmt.Sprint("from ", g.Rank())))
	if err != nil {
		return err
	}
	if string(b) != fmt.Sprint("from ", root) {
		return fmt.Errorf("broadcast gave %q", b)
	}
	return nil
}

// TestJoinTCPFailures: a rank with another secret, ranks without one, a
// rendezvous port another process holds, a rank that never comes.
func TestJoinTCPFailures(t *testing.T) {
	t.Run("wrong secret", func(t *testing.T) {
		ln, secret := loopback(t), randomSecret(t)
		errs := runRanks(t, 3, func(r int) map[string]string {
			env := crossEnv(ln.Addr().String(), secret, r, 3, 1)
			if r == 2 {
				env[EnvJobSecret] = randomSecret(t)
			}
			return env
		}, []JoinOption{withListener(ln), WithTimeout(time.Second)}, func(int, *Group) error { return nil })
		if err := errs[2]; !errors.Is(err, ErrSecret) || !strings.Contains(err.Error(), "wrong job secret") ||
			!strings.Contains(err.Error(), "every rank needs the same TPRUN_JOB_SECRET or TPRUN_JOB_SECRET_FILE") {
			t.Errorf("rank 2: %v", err)
		}
		for r := range 2 {
			var rv *RendezvousError
			if !errors.As(errs[r], &rv) || !slices.Equal(rv.Missing, []int{2}) ||
				!strings.Contains(errs[r].Error(), "rank 2 (torchrun node 2) never connected") {
				t.Errorf("rank %d: %v", r, errs[r])
			}
		}
	})
	t.Run("no secret", func(t *testing.T) {
		env := withEnv(crossEnv("127.0.0.1:9", "", 1, 2, 1), EnvJobSecret, "")
		_, err := Join(context.Background(), WithEnv(env))
		var ee *EnvError
		if !errors.As(err, &ee) || ee.Var != EnvJobSecret || !strings.Contains(err.Error(), "TPRUN_FORCE_NODE=node-b") {
			t.Errorf("got %v", err)
		}
	})
	t.Run("port in use", func(t *testing.T) {
		taken := loopback(t)
		env := crossEnv(taken.Addr().String(), randomSecret(t), 0, 2, 1)
		_, err := Join(context.Background(), WithEnv(env), WithTimeout(time.Second))
		if err == nil || !strings.Contains(err.Error(), "address already in use") ||
			!strings.Contains(err.Error(), "set TPRUN_RENDEZVOUS=host:port to a free port on this node") ||
			!strings.Contains(err.Error(), "rendezvous at "+taken.Addr().String()+" from TPRUN_RENDEZVOUS") {
			t.Errorf("got %v", err)
		}
	})
	t.Run("rank 0 never comes", func(t *testing.T) {
		ln := loopback(t)
		addr := ln.Addr().String()
		_ = ln.Close() // nobody listens there now: rank 1 keeps trying
		start := time.Now()
		_, err := Join(context.Background(), WithEnv(crossEnv(addr, randomSecret(t), 1, 2, 1)), WithTimeout(200*time.Millisecond))
		if err == nil || !strings.Contains(err.Error(), "rank 0 did not open the rendezvous within 200ms") {
			t.Errorf("got %v", err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("gave up after %v", took)
		}
	})
	t.Run("collective timeout names the node", func(t *testing.T) {
		ln, secret := loopback(t), randomSecret(t)
		waiting := make(chan struct{}, 4)
		errs := runRanks(t, 4, func(r int) map[string]string { return crossEnv(ln.Addr().String(), secret, r, 4, 2) },
			[]JoinOption{withListener(ln), WithCollectiveTimeout(300 * time.Millisecond)}, func(r int, g *Group) error {
				if r == 3 {
					for range 3 {
						<-waiting
					}
					return nil
				}
				err := g.Barrier(context.Background())
				waiting <- struct{}{}
				var ce *CollectiveTimeoutError
				if !errors.As(err, &ce) || !slices.Equal(ce.Missing, []int{3}) || !strings.Contains(err.Error(), "rank 3 (pid") ||
					!strings.Contains(err.Error(), "on node-b) never joined it") {
					return fmt.Errorf("got %v", err)
				}
				return nil
			})
		noErrors(t, errs)
	})
}

// TestResolveMailboxAcrossNodes: ranks on two nodes with the same device
// ordinals, each node's GPUs peers of each other only: auto picks unicast
// over fabric handles under the safety rule (not host, not a refusal for
// missing peer access across nodes, not "ranks share a device"), and the
// host backend fails naming the reason.
func TestResolveMailboxAcrossNodes(t *testing.T) {
	const n, perNode = 4, 2
	ln, secret := loopback(t), randomSecret(t)
	errs := runRanks(t, n, func(r int) map[string]string { return crossEnv(ln.Addr().String(), secret, r, n, perNode) },
		[]JoinOption{withListener(ln)}, func(r int, g *Group) error {
			dev := r % perNode
			p := gpuProbe{usable: true, peers: 0b11 &^ (1 << dev),
				facts: mailbox.DeviceFacts{Device: dev, VMM: true, POSIXFD: true, Fabric: true, Multicast: true}}
			safety := func(k string) string {
				if k == "NCCL_NVLS_ENABLE" {
					return "0"
				}
				return ""
			}
			kind, reason, _, err := resolveMailbox(context.Background(), g, mailbox.KindAuto, p, safety)
			if err != nil || kind != mailbox.KindUnicast || !strings.Contains(reason, "devices node-a:0,node-a:1,node-b:0,node-b:1 share VMM memory peer to peer (across 2 nodes, through fabric handles)") {
				return fmt.Errorf("auto: %v %q %v", kind, reason, err)
			}
			// The host backend shares descriptors: it fails on every rank,
			// saying why, and the group goes on.
			h, err := mailbox.NewHost(context.Background(), g, mailbox.Config{Hidden: 16, Capacity: 2})
			if err == nil {
				_ = h.Close()
			}
			if !errors.Is(err, ErrCrossNode) {
				return fmt.Errorf("host backend across nodes: %v, want ErrCrossNode", err)
			}
			if r == 0 {
				t.Logf("host backend across nodes: %v", err)
			}
			return g.Barrier(context.Background())
		})
	noErrors(t, errs)
}
