package tp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tprun/tprun/internal/hub"
)

// The variables of a job across nodes.
const (
	// EnvRendezvous is host:port of the TCP rendezvous across nodes, where
	// rank 0 listens and every rank connects; it overrides what the
	// launcher's variables give (torchrun: MASTER_ADDR and MASTER_PORT+1;
	// srun: the step's first node and a port derived from the job id).
	// ":port" keeps the launcher's host. mpirun gives none: set it there.
	EnvRendezvous = "TPRUN_RENDEZVOUS"
	// EnvJobSecret is the job secret every rank of a job across nodes must
	// present, the same on every rank, at least 16 bytes. A TCP rendezvous
	// without one is refused: an open port would let anyone who reaches
	// it into the job.
	EnvJobSecret = "TPRUN_JOB_SECRET"
	// EnvJobSecretFile names a file that holds the job secret instead;
	// only its owner, the job's user, may read it (mode 0600 or 0400).
	EnvJobSecretFile = "TPRUN_JOB_SECRET_FILE"
	// EnvForceNode makes this rank say it runs on the named node and join
	// as in a job across nodes (TCP, fabric handles) though it may share
	// the machine with others: to try a multi-node setup on one machine.
	EnvForceNode = "TPRUN_FORCE_NODE"
	// EnvNodeTimeout bounds the silence of a rank's connection in a job
	// across nodes (a Go duration or seconds; default 10s): once a node
	// has been silent that long, the job ends on every other node naming
	// it and its ranks.
	EnvNodeTimeout = "TPRUN_NODE_TIMEOUT"
)

// The errors of a job across nodes, for errors.Is and errors.As.
var (
	// ErrCrossNode: a descriptor collective in a job whose ranks span
	// nodes; descriptors do not cross nodes.
	ErrCrossNode = hub.ErrCrossNode
	// ErrSecret: the ranks' job secrets differ (the hub refused this
	// rank, or could not prove it knows this rank's secret).
	ErrSecret = hub.ErrSecret
)

// NodeError is the job failure of a node whose ranks went silent: cut off
// from the network, stalled or down. It matches ErrAborted.
type NodeError = hub.NodeError

// srunPortBase and srunPorts: the range the srun rendezvous port is
// derived in, below Linux's ephemeral ports (32768 and up) so that no
// outgoing connection of the node holds it by chance.
const (
	srunPortBase = 20000
	srunPorts    = 12000
)

// crossNode works out whether the job spans nodes and, if so, where the
// TCP rendezvous is.
func (e *envReader) crossNode(l *launch) {
	l.forcedNode, _ = e.lookup(EnvForceNode)
	l.forcedNode = strings.TrimSpace(l.forcedNode)
	if l.forcedNode != "" && l.launcher == LauncherTprun {
		e.fail(EnvForceNode, l.forcedNode, "the tprun launcher runs every rank on its own node; %s applies to jobs started by srun, torchrun or mpirun", EnvForceNode)
		return
	}
	l.cross = l.launcher != LauncherTprun && (l.localSize != l.size || l.forcedNode != "")
	if !l.cross {
		return
	}
	rv, _ := e.lookup(EnvRendezvous)
	rv = strings.TrimSpace(rv)
	host, port := "", ""
	if rv != "" {
		h, p, err := net.SplitHostPort(rv)
		if err != nil || !validPort(p) {
			e.fail(EnvRendezvous, rv, "not host:port (or :port) with a port in 1..65535")
			return
		}
		host, port = h, p
	}
	var hostFrom, portFrom string // what gave host and port, when not TPRUN_RENDEZVOUS
	switch l.launcher {
	case LauncherTorchrun:
		h, hok := e.lookup("MASTER_ADDR")
		p, pok := e.lookup("MASTER_PORT")
		if host == "" {
			if !hok || h == "" {
				e.fail("MASTER_ADDR", "", "not set: torchrun sets it to the node of rank 0; without it set %s=host:port", EnvRendezvous)
				return
			}
			host, hostFrom = h, "MASTER_ADDR"
		}
		if port == "" {
			// MASTER_PORT itself is torchrun's own store.
			n, err := strconv.Atoi(strings.TrimSpace(p))
			if !pok || err != nil || n < 1 || n >= 65535 {
				e.fail("MASTER_PORT", p, "not a port below 65535: the rendezvous uses MASTER_PORT+1; set %s=host:port instead", EnvRendezvous)
				return
			}
			port, portFrom = strconv.Itoa(n+1), "MASTER_PORT+1"
		}
		if local := l.localSize; local > 0 {
			l.hostOf = func(r int) string {
				if r/local == 0 {
					return h
				}
				return fmt.Sprintf("torchrun node %d", r/local)
			}
		}
	case LauncherSrun:
		nodes, listVar := e.slurmNodes()
		if e.err != nil {
			return
		}
		if host == "" {
			if len(nodes) == 0 {
				e.fail("SLURM_STEP_NODELIST", "", "not set, nor SLURM_JOB_NODELIST: no node list to find rank 0's node in; set %s=host:port", EnvRendezvous)
				return
			}
			host, hostFrom = nodes[0], listVar+"'s first node"
			if l.rank == 0 {
				if id := e.optNum("SLURM_NODEID", 0); id != 0 && e.err == nil {
					e.fail("SLURM_NODEID", strconv.Itoa(id), "rank 0 runs on node %d of %s, not on its first node %s, where the others look for it: set %s=host:port on every rank",
						id, listVar, nodes[0], EnvRendezvous)
					return
				}
			}
		}
		if port == "" {
			h := fnv.New32a()
			h.Write([]byte(l.jobID))
			port, portFrom = strconv.Itoa(srunPortBase+int(h.Sum32()%srunPorts)), "a port derived from the Slurm job id"
		}
		l.hostOf = slurmPlacement(nodes, e)
	default:
		if host == "" || port == "" {
			e.fail(EnvRendezvous, rv, "not set: %s started the job across nodes (%d of its %d ranks on this node), and only %s says where rank 0 listens: "+
				"set it to host:port on rank 0's node, the same on every rank (mpirun -x %s=...)",
				l.launcher, l.localSize, l.size, EnvRendezvous, EnvRendezvous)
			return
		}
	}
	switch {
	case hostFrom == "" && portFrom == "":
		l.rendezvousFrom = EnvRendezvous
	case hostFrom == "":
		l.rendezvousFrom = EnvRendezvous + " and " + portFrom
	case portFrom == "":
		l.rendezvousFrom = hostFrom + " and " + EnvRendezvous + "'s port"
	default:
		l.rendezvousFrom = hostFrom + " and " + portFrom
	}
	l.rendezvous = net.JoinHostPort(host, port)
}

func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n >= 1 && n <= 65535
}

// slurmNodes expands the step's node list (or the job's).
func (e *envReader) slurmNodes() ([]string, string) {
	for _, k := range []string{"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"} {
		v, ok := e.lookup(k)
		if !ok || strings.TrimSpace(v) == "" {
			continue
		}
		nodes, err := expandHostlist(strings.TrimSpace(v))
		if err != nil {
			e.fail(k, v, "%v", err)
			return nil, k
		}
		return nodes, k
	}
	return nil, ""
}

// slurmPlacement is where srun puts each rank under its default block
// distribution (the first node's tasks first), or nil when the
// distribution is another or the lists do not say.
func slurmPlacement(nodes []string, e *envReader) func(int) string {
	if d, _ := e.lookup("SLURM_DISTRIBUTION"); d != "" && !strings.HasPrefix(d, "block") {
		return nil
	}
	var counts []int
	for _, k := range []string{"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"} {
		if v, ok := e.lookup(k); ok && v != "" {
			c, err := parseTasksPerNode(v)
			if err != nil {
				return nil
			}
			counts = c
			break
		}
	}
	if len(counts) != len(nodes) {
		return nil
	}
	return func(r int) string {
		for i, c := range counts {
			if r < c {
				return nodes[i]
			}
			r -= c
		}
		return ""
	}
}

// maxHosts bounds a node list's expansion.
const maxHosts = 1 << 16

// expandHostlist expands Slurm's compressed host list: "gpu[01-03,07],
// login1" is gpu01 gpu02 gpu03 gpu07 login1; several bracket groups in
// one name multiply ("r[1-2]n[1-2]"); a range keeps its lower bound's
// zero padding.
func expandHostlist(s string) ([]string, error) {
	var out []string
	depth, start := 0, 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) {
			switch s[i] {
			case '[':
				depth++
				if depth > 1 {
					return nil, fmt.Errorf("nested brackets in host list %q", s)
				}
				continue
			case ']':
				depth--
				if depth < 0 {
					return nil, fmt.Errorf("unbalanced brackets in host list %q", s)
				}
				continue
			case ',':
				if depth > 0 {
					continue
				}
			default:
				continue
			}
		}
		if depth != 0 {
			return nil, fmt.Errorf("unbalanced brackets in host list %q", s)
		}
		item := strings.TrimSpace(s[start:i])
		start = i + 1
		if item == "" {
			continue
		}
		names, err := expandHost(item, maxHosts-len(out))
		if err != nil {
			return nil, fmt.Errorf("host list %q: %w", s, err)
		}
		out = append(out, names...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("host list %q names no host", s)
	}
	return out, nil
}

// expandHost expands one name with bracket groups, at most limit names.
func expandHost(item string, limit int) ([]string, error) {
	open := strings.IndexByte(item, '[')
	if open < 0 {
		return []string{item}, nil
	}
	end := strings.IndexByte(item[open:], ']')
	if end < 0 {
		return nil, fmt.Errorf("%q: unbalanced brackets", item)
	}
	end += open
	prefix, body, rest := item[:open], item[open+1:end], item[end+1:]
	tails, err := expandHost(rest, limit)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, part := range strings.Split(body, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || a < 0 || b < a {
			return nil, fmt.Errorf("%q: %q is not a number or a lo-hi range", item, part)
		}
		if (b-a+1)*len(tails) > limit-len(out) {
			return nil, fmt.Errorf("%q expands to more than %d hosts", item, maxHosts)
		}
		for n := a; n <= b; n++ {
			num := fmt.Sprintf("%0*d", len(lo), n)
			for _, t := range tails {
				out = append(out, prefix+num+t)
			}
		}
	}
	return out, nil
}

// jobSecret reads the job secret from TPRUN_JOB_SECRET or the file
// TPRUN_JOB_SECRET_FILE names.
func jobSecret(lookup func(string) (string, bool), nodes string) ([]byte, error) {
	v, hasV := lookup(EnvJobSecret)
	f, hasF := lookup(EnvJobSecretFile)
	hasV, hasF = hasV && v != "", hasF && f != ""
	var secret []byte
	switch {
	case hasV && hasF:
		return nil, &EnvError{Var: EnvJobSecretFile, Value: f, Problem: fmt.Sprintf("set together with %s: set one of them", EnvJobSecret)}
	case hasV:
		secret = []byte(strings.TrimSpace(v))
	case hasF:
		b, err := readSecretFile(f)
		if err != nil {
			return nil, &EnvError{Var: EnvJobSecretFile, Value: f, Problem: err.Error()}
		}
		secret = b
	default:
		return nil, &EnvError{Var: EnvJobSecret, Problem: fmt.Sprintf(
			"not set, nor %s: the ranks of this job (%s) meet over TCP, and a TCP rendezvous without a job secret would let anyone who reaches the port into the job; "+
				"set %s to the same random string on every rank (export %s=$(openssl rand -hex 32) before launching), "+
				"or %s to a file only you can read that holds it", EnvJobSecretFile, nodes, EnvJobSecret, EnvJobSecret, EnvJobSecretFile)}
	}
	if len(secret) < hub.MinSecret {
		name, val := EnvJobSecret, ""
		if hasF {
			name, val = EnvJobSecretFile, f
		}
		return nil, &EnvError{Var: name, Value: val, Problem: fmt.Sprintf("the job secret has %d bytes; at least %d are needed (openssl rand -hex 32 makes one)", len(secret), hub.MinSecret)}
	}
	return secret, nil
}

// maxSecretFile bounds what readSecretFile reads.
const maxSecretFile = 4 << 10

// readSecretFile reads a secret from a regular file that only its owner,
// this user, can read or write.
func readSecretFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return nil, errors.New("not a regular file")
	case !ok || int(st.Uid) != os.Getuid():
		return nil, fmt.Errorf("not owned by this user (uid %d)", os.Getuid())
	case fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("mode %v lets others read or write it; chmod 600 it", fi.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxSecretFile {
		return nil, fmt.Errorf("larger than %d bytes", maxSecretFile)
	}
	return []byte(strings.TrimSpace(string(b))), nil
}

// tcpToken is the hello token of a job across nodes: it keeps the ranks
// of different jobs apart (the secret keeps others out). Unlike jobToken
// it leaves the uid out: a user's uid may differ between nodes.
func tcpToken(launcher, jobID string) string {
	sum := sha256.Sum256([]byte("tprun-token-tcp\x00" + launcher + "\x00" + jobID))
	return hex.EncodeToString(sum[:])
}

// nodeTimeout reads TPRUN_NODE_TIMEOUT.
func nodeTimeout(lookup func(string) (string, bool)) (time.Duration, error) {
	return envDuration(lookup, EnvNodeTimeout, hub.DefaultLiveness, "10s")
}

// joinTCP joins a job across nodes: rank 0 serves the hub on TCP at the
// rendezvous address; every rank, rank 0 included, connects to it and
// proves the job secret.
func joinTCP(ctx context.Context, cfg joinConfig, l launch, hello hub.Hello, collective time.Duration) (*Group, error) {
	who := fmt.Sprintf("tp: rank %d of %d on %s (%s job %q, rendezvous at %s from %s)", l.rank, l.size, l.node, l.launcher, l.jobID, l.rendezvous, l.rendezvousFrom)
	nodes := fmt.Sprintf("%d of its %d ranks on this node", l.localSize, l.size)
	if l.forcedNode != "" {
		nodes = fmt.Sprintf("%s=%s", EnvForceNode, l.forcedNode)
	}
	secret, err := jobSecret(cfg.lookup, nodes)
	if err != nil {
		return nil, err
	}
	live, err := nodeTimeout(cfg.lookup)
	if err != nil {
		return nil, err
	}
	hello.Token = tcpToken(l.launcher, l.jobID)
	g := &Group{l: l}
	addr := l.rendezvous
	if l.rank == 0 {
		srv, err := hub.Listen(hub.ServerConfig{
			WorldSize:             l.size,
			Token:                 hello.Token,
			TCPAddr:               l.rendezvous,
			Listener:              cfg.listener,
			Secret:                secret,
			Liveness:              live,
			RendezvousTimeout:     cfg.timeout,
			Logf:                  cfg.logf,
			CollectiveTimeout:     collective,
			CollectiveTimeoutKnob: collectiveKnob,
			Where:                 l.hostOf,
		})
		if err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				return nil, fmt.Errorf("%s: cannot open the rendezvous: %w; set %s=host:port to a free port on this node, the same on every rank", who, err, EnvRendezvous)
			}
			return nil, fmt.Errorf("%s: cannot open the rendezvous: %w", who, err)
		}
		sctx, stop := context.WithCancel(context.Background())
		g.srv, g.stopServe, g.served = srv, stop, make(chan error, 1)
		go func() { g.served <- srv.Serve(sctx) }()
		addr = srv.Path()
	}
	dctx, cancel := context.WithTimeout(ctx, cfg.timeout+2*time.Second)
	defer cancel()
	c, err := hub.DialTCP(dctx, addr, hello, hub.TCPConfig{Secret: secret, Liveness: live})
	if err != nil {
		switch {
		case l.rank != 0 && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			err = fmt.Errorf("%s: rank 0 did not open the rendezvous within %v: %w", who, cfg.timeout, err)
		case errors.Is(err, hub.ErrSecret):
			err = fmt.Errorf("%s: %w (every rank needs the same %s or %s)", who, err, EnvJobSecret, EnvJobSecretFile)
		default:
			err = fmt.Errorf("%s: %w", who, blameHost(l, l.rank == 0, "", err))
		}
		if herr := g.stopHub(); herr != nil {
			err = errors.Join(err, fmt.Errorf("tp: rank 0 stopping the hub: %w", herr))
		}
		return nil, err
	}
	g.c = c
	return g, nil
}

// rankNodes names each rank's node when ex's ranks span nodes (a Group
// across nodes), else nil: what mailbox.Facts.Nodes wants.
func rankNodes(ex interface{ Rank() int }) []string {
	g, ok := ex.(interface {
		SpansNodes() bool
		Peers() []Peer
	})
	if !ok || !g.SpansNodes() {
		return nil
	}
	peers := g.Peers()
	nodes := make([]string, len(peers))
	for r, p := range peers {
		nodes[r] = p.Hostname
	}
	return nodes
}

// sameNode reports whether ranks a and b share a node (always, when nodes
// is nil: one node). Peer access between GPUs is a question within a node;
// across nodes the fabric handles are the access.
func sameNode(nodes []string, a, b int) bool {
	return nodes == nil || nodes[a] == nodes[b]
}
