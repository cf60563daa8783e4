package hub

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tprun/tprun/internal/fdpass"
)

// Hello is what a rank says when it connects.
type Hello struct {
	Rank, WorldSize, LocalRank, PID int
	Hostname, Device                string
	Token                           string // job token; checked by the server, never sent to peers
}

// ServerConfig configures Listen.
type ServerConfig struct {
	WorldSize int
	Token     string
	// Path of the socket. Empty: Listen makes a fresh 0700 directory under
	// os.TempDir() (under /tmp when that path would be too long for a
	// socket) and puts the socket in it; Close removes both. Given:
	// its parent is created 0700 when missing, a stale socket file (nobody
	// listening) is replaced, and Close removes only the socket.
	Path              string
	RendezvousTimeout time.Duration                    // 0 means 60 s
	Logf              func(format string, args ...any) // refusals are logged here; nil = silent
	// TimeoutKnob names what sets RendezvousTimeout for the people reading
	// a timeout ("tprun --rendezvous-timeout"); the hub knows no launcher
	// of its own. Empty: the message names none.
	TimeoutKnob string
	// CollectiveTimeout bounds a collective for ranks whose call does not
	// carry a timeout of its own (0 means DefaultCollectiveTimeout); each
	// call normally carries its rank's (Client.SetCollectiveTimeout).
	CollectiveTimeout time.Duration
	// CollectiveTimeoutKnob names what sets the collective timeouts, for
	// the hub's own log line of one; empty: none is named.
	CollectiveTimeoutKnob string

	// TCPAddr makes the hub serve ranks on several nodes over TCP at this
	// address (host:port) instead of a Unix socket; Listener does the same
	// on a listener the caller opened (Close closes it). Either needs
	// Secret; Path is then unused.
	TCPAddr  string
	Listener net.Listener
	// Secret is the job secret every TCP client must prove it knows (and
	// that the hub proves to it). The hub refuses to listen on TCP
	// without one.
	Secret []byte
	// Liveness: over TCP, a rank whose connection has been silent this
	// long is taken for dead, with its node (0 means DefaultLiveness).
	// Both ends ping after a fifth of it.
	Liveness time.Duration
	// Where says on which host a rank is expected ("" when unknown), for
	// the message of a rendezvous that times out; nil: nobody knows.
	Where func(rank int) string
}

// DefaultLiveness is how long a TCP connection may be silent before its
// rank, and its node, are taken for dead: long enough for a loaded node to
// keep pinging, short against the job's deadlines.
const DefaultLiveness = 10 * time.Second

// MinSecret is the shortest job secret the TCP hub accepts, in bytes.
const MinSecret = 16

// DefaultCollectiveTimeout is how long a collective waits for its last
// rank when neither the call nor the hub's configuration says otherwise.
// The collectives run at setup and shutdown, never in the step loop, so a
// rank that is alive but five minutes late to one has stalled: loading or
// packing a weight shard takes seconds to a minute, and PyTorch's NCCL
// watchdog, the limit people serving models know, waits ten minutes.
// Half of that frees a serving slot sooner and still leaves room for a
// slow node's setup.
const DefaultCollectiveTimeout = 5 * time.Minute

const (
	defaultRendezvousTimeout = 60 * time.Second
	// defaultHelloTimeout bounds how long a connection may sit without
	// saying hello, so a stray connection cannot hold a goroutine forever.
	defaultHelloTimeout = 10 * time.Second
	// maxSocketPath is sun_path's size less the terminating NUL.
	maxSocketPath = 107
)

// Server is the hub of one job. Listen, then Serve (usually in a
// goroutine), then Close.
type Server struct {
	cfg          ServerConfig
	ln           net.Listener
	tcp          bool     // ranks connect over TCP
	path         string   // the socket's path, or the TCP address
	dir          string   // directory Listen made; "" when cfg.Path was given
	owner        *os.File // dir's owner file, flock'ed while the hub lives; nil without dir
	uid          int      // the uid every peer must have (tests change it)
	helloTimeout time.Duration

	mu       sync.Mutex
	conns    map[*peer]struct{} // every open connection, admitted or not
	ranks    []*peer            // index = rank; nil until its hello was accepted
	hellos   []Hello
	saidHi   []bool // per rank: a hello was admitted, or turned away because the job had failed
	joined   int
	welcomed bool
	failure  error    // the first job failure, nil while the job is healthy
	failWire *failMsg // failure as sent to clients
	pending  map[uint64]*collective
	nextSeq  []uint64     // per rank: the sequence number its next call must carry
	left     []bool       // per rank: said bye
	exited   []ExitedRank // ranks whose process ended before their hello (Exited)
	lastSeq  []uint64     // per rank that left: its last sequence number
	closing  bool
	served   bool

	firstJoin chan struct{} // closed when the first rank said hello
	welcome   chan struct{} // closed when every rank said hello
	failed    chan struct{} // closed on the first job failure
	stop      chan struct{} // closed by shutdown
	serveDone chan struct{} // closed when Serve returns
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// collective is one call (one sequence number) while ranks arrive.
type collective struct {
	seq     uint64
	kind    opKind
	root    int
	first   int // rank that arrived first, named in mismatch errors
	arrived int
	in      []bool // per rank: arrived
	data    [][]byte
	fds     [][]int

	// The earliest deadline of the ranks that arrived, the timeout that
	// set it, and the timer that fails the job at it.
	deadline time.Time
	limit    time.Duration
	timer    *time.Timer
}

// release frees what the collective holds and stops its timer; it is
// called once the collective completed or the job failed or closed.
func (c *collective) release() {
	if c.timer != nil {
		c.timer.Stop()
	}
	for _, f := range c.fds {
		fdpass.Close(f)
	}
	c.fds = nil
}

const (
	hubDirPrefix = "tprun-hub-" // the directories Listen makes under os.TempDir() (or /tmp, see socketBase)
	ownerFile    = "owner.pid"  // in each: the pid of the process that made it
)

// fallbackTmp is where Listen makes its directory when the socket path
// under os.TempDir() would be too long (a variable for the tests).
var fallbackTmp = "/tmp"

// socketBase is where Listen makes its directory: tmp, unless the socket
// path there would be too long for a Unix socket (a deep TMPDIR), and then
// fallbackTmp. It returns an error, naming TMPDIR, when the path is too
// long and fallbackTmp is no directory.
func socketBase(tmp string) (base string, fellBack bool, err error) {
	// MkdirTemp adds a random number of at most 20 digits to the prefix.
	n := len(filepath.Join(tmp, hubDirPrefix+"12345678901234567890", "hub.sock"))
	if n <= maxSocketPath || tmp == fallbackTmp {
		return tmp, false, nil
	}
	if fi, err := os.Stat(fallbackTmp); err != nil || !fi.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		return "", false, fmt.Errorf("hub: the temp directory %s (TMPDIR) is too long for a Unix socket path (%d bytes with the socket's name, at most %d), and %s is not there to fall back on (%v): set TMPDIR to a shorter directory",
			tmp, n, maxSocketPath, fallbackTmp, err)
	}
	return fallbackTmp, true, nil
}

// removeStaleDirs removes the hub directories under tmp that a process left
// behind when it died without closing its hub (tprun SIGKILLed): this
// user's, whose owner file nobody holds locked. The hub that made a
// directory holds an exclusive flock on its owner file while it lives (the
// kernel drops it when the process dies), which holds across pid
// namespaces and pid reuse, unlike a look at the pid the file names. A
// directory without that file (made by an older tprun, or being made right
// now) is left alone.
func removeStaleDirs(tmp string) {
	dirs, _ := filepath.Glob(filepath.Join(tmp, hubDirPrefix+"*"))
	for _, d := range dirs {
		fi, err := os.Lstat(d)
		if err != nil || !fi.IsDir() {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
			continue
		}
		f, err := os.Open(filepath.Join(d, ownerFile))
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			_ = os.RemoveAll(d)
		}
		_ = f.Close()
	}
}

// lockOwnerFile creates the owner file with this process's pid, holding an
// exclusive flock on it (the descriptor is close-on-exec, so the ranks do
// not inherit the lock). The file is made and locked under another name
// and then renamed, so that removeStaleDirs never finds it unlocked.
func lockOwnerFile(path string) (*os.File, error) {
	tmp := path + ".new"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*os.File, error) {
		_ = f.Close()
		_ = os.Remove(tmp)
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fail(fmt.Errorf("locking %s: %w", tmp, err))
	}
	if _, err := f.WriteString(strconv.Itoa(os.Getpid()) + "\n"); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	return f, nil
}

// Listen creates the socket. The rendezvous clock starts when the first
// rank says hello: a job whose ranks never use the hub (tprun -- CMD with a
// command that is not a tprun rank) has no rendezvous to time out.
func Listen(cfg ServerConfig) (*Server, error) {
	if cfg.WorldSize < 1 || cfg.WorldSize > MaxWorldSize {
		return nil, fmt.Errorf("hub: world size %d out of range [1,%d]", cfg.WorldSize, MaxWorldSize)
	}
	if cfg.Token == "" {
		return nil, errors.New("hub: empty job token")
	}
	if cfg.RendezvousTimeout <= 0 {
		cfg.RendezvousTimeout = defaultRendezvousTimeout
	}
	if cfg.CollectiveTimeout <= 0 {
		cfg.CollectiveTimeout = DefaultCollectiveTimeout
	}
	if cfg.Liveness <= 0 {
		cfg.Liveness = DefaultLiveness
	}
	tcp := cfg.TCPAddr != "" || cfg.Listener != nil
	if tcp && len(cfg.Secret) < MinSecret {
		if cfg.Listener != nil {
			_ = cfg.Listener.Close()
		}
		return nil, fmt.Errorf("hub: a TCP hub needs a job secret of at least %d bytes (it has %d): an open port without one would let anyone who reaches it into the job", MinSecret, len(cfg.Secret))
	}
	s := &Server{
		cfg:          cfg,
		uid:          os.Getuid(),
		helloTimeout: defaultHelloTimeout,
		conns:        make(map[*peer]struct{}),
		ranks:        make([]*peer, cfg.WorldSize),
		hellos:       make([]Hello, cfg.WorldSize),
		saidHi:       make([]bool, cfg.WorldSize),
		pending:      make(map[uint64]*collective),
		nextSeq:      make([]uint64, cfg.WorldSize),
		left:         make([]bool, cfg.WorldSize),
		lastSeq:      make([]uint64, cfg.WorldSize),
		firstJoin:    make(chan struct{}),
		welcome:      make(chan struct{}),
		failed:       make(chan struct{}),
		stop:         make(chan struct{}),
		serveDone:    make(chan struct{}),
	}
	for r := range s.nextSeq {
		s.nextSeq[r] = 1
	}
	if tcp {
		if err := s.listenTCP(); err != nil {
			return nil, err
		}
		return s, nil
	}
	if cfg.Path == "" {
		base, fellBack, err := socketBase(os.TempDir())
		if err != nil {
			return nil, err
		}
		removeStaleDirs(base)
		dir, err := os.MkdirTemp(base, hubDirPrefix)
		if err != nil && fellBack {
			return nil, fmt.Errorf("hub: the temp directory %s (TMPDIR) is too long for a Unix socket path, and making the socket directory in %s instead failed: %w; set TMPDIR to a shorter writable directory",
				os.TempDir(), base, err)
		}
		if err != nil {
			return nil, fmt.Errorf("hub: making socket directory: %w", err)
		}
		// MkdirTemp already uses 0700; say so rather than trust it.
		if err := os.Chmod(dir, 0o700); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("hub: %w", err)
		}
		// Locked while this hub lives, for removeStaleDirs of a later job
		// should this process die without Close (SIGKILL); the pid is for
		// people.
		owner, err := lockOwnerFile(filepath.Join(dir, ownerFile))
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("hub: %w", err)
		}
		s.dir, s.owner, s.path = dir, owner, filepath.Join(dir, "hub.sock")
	} else {
		s.path = cfg.Path
		if err := prepareSocketPath(s.path); err != nil {
			return nil, err
		}
	}
	if err := s.listen(); err != nil {
		if s.owner != nil {
			_ = s.owner.Close()
		}
		if s.dir != "" {
			_ = os.RemoveAll(s.dir)
		}
		return nil, err
	}
	return s, nil
}

// listenTCP opens the TCP listener (or takes the caller's).
func (s *Server) listenTCP() error {
	s.tcp = true
	s.uid = -1
	ln := s.cfg.Listener
	if ln == nil {
		var err error
		ln, err = net.Listen("tcp", s.cfg.TCPAddr)
		if err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				return fmt.Errorf("hub: listening on %s: %w (another job or process holds this port)", s.cfg.TCPAddr, err)
			}
			return fmt.Errorf("hub: listening on %s: %w", s.cfg.TCPAddr, err)
		}
	}
	s.ln = ln
	s.path = ln.Addr().String()
	return nil
}

func (s *Server) listen() error {
	if len(s.path) > maxSocketPath {
		return fmt.Errorf("hub: socket path %q is %d bytes, the limit is %d", s.path, len(s.path), maxSocketPath)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: s.path, Net: "unix"})
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	// Close removes the file itself, after the connections are gone.
	ln.SetUnlinkOnClose(false)
	// The 0700 directory is the real fence; this narrows the umask's
	// choice for sockets in a directory we did not make.
	if err := os.Chmod(s.path, 0o600); err != nil {
		_ = ln.Close()
		_ = os.Remove(s.path)
		return fmt.Errorf("hub: %w", err)
	}
	s.ln = ln
	return nil
}

// prepareSocketPath makes path's directory (0700) if missing and removes a
// stale socket there, but never one that somebody still listens on.
func prepareSocketPath(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("hub: making socket directory: %w", err)
	}
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("hub: %s exists and is not a socket", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		_ = c.Close()
		return fmt.Errorf("hub: %s: another hub is listening there", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("hub: probing stale socket: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("hub: removing stale socket: %w", err)
	}
	return nil
}

// Path is where the ranks find the hub: the socket's path (TPRUN_HUB for
// the ranks), or for a TCP hub its address (host:port).
func (s *Server) Path() string { return s.path }

// Err returns the job's failure (a *RankError, *RendezvousError or
// *JobError), or nil while the job is healthy.
func (s *Server) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failure
}

// Failed is closed when the job fails; Err then says why.
func (s *Server) Failed() <-chan struct{} { return s.failed }

// Serve accepts connections until ctx is done or Close is called (it then
// returns nil once every connection is closed), or until accepting fails.
// A job failure does not end Serve: ranks that connect later are told the
// failure instead of hanging. Serve may be called once.
func (s *Server) Serve(ctx context.Context) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return ErrClosed
	}
	if s.served {
		s.mu.Unlock()
		return errors.New("hub: Serve called twice")
	}
	s.served = true
	s.mu.Unlock()
	defer close(s.serveDone)

	stopWatch := context.AfterFunc(ctx, s.shutdown)
	defer stopWatch()

	s.wg.Add(1)
	go s.watchRendezvous()
	if s.tcp {
		s.wg.Add(1)
		go s.watchLiveness()
	}

	var err error
	for {
		c, aerr := s.ln.Accept()
		if aerr != nil {
			if s.isClosing() {
				break
			}
			if errors.Is(aerr, syscall.EMFILE) || errors.Is(aerr, syscall.ENFILE) || errors.Is(aerr, syscall.ECONNABORTED) {
				// Out of descriptors for a moment; connections wait in the
				// backlog meanwhile.
				s.logf("hub: accept: %v; retrying", aerr)
				select {
				case <-time.After(50 * time.Millisecond):
				case <-s.stop:
				}
				continue
			}
			err = fmt.Errorf("hub: accept on %s: %w", s.path, aerr)
			s.shutdown()
			break
		}
		var fc *frameConn
		if uc, ok := c.(*net.UnixConn); ok {
			fc = newFrameConn(uc)
		} else {
			fc = newStreamConn(c)
		}
		p := &peer{s: s, fc: fc, rank: -1, wake: make(chan struct{}, 1), done: make(chan struct{})}
		p.heard.Store(time.Now().UnixNano())
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			_ = c.Close()
			continue
		}
		s.conns[p] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.handle(p)
	}
	s.wg.Wait()
	return err
}

// Abort fails every pending and future call of every client with a
// *RankError naming rank (the launcher calls it when a rank process dies).
// Only the first failure of a job counts. Unlike the failures the hub finds
// itself, it is not logged: the caller knows it and reports it.
func (s *Server) Abort(rank int, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failQuietLocked(&RankError{Rank: rank, Reason: reason})
}

// Exited tells the hub that rank's process has ended; how is the
// launcher's description of the end ("exit status 0"). It matters only
// for a rank that never said hello, while the rendezvous is under way: that
// rank can no longer join, so the rendezvous fails at once, for every rank
// waiting in it and for any that says hello later, with a
// *RendezvousError listing it in Exited (logged, as a timeout is). While
// no rank has said hello nothing waits, and nothing is logged: the ranks of
// a job may never use the hub at all. A rank that said hello already told
// the hub how it left (its goodbye or its dropped connection), and a
// failed job stays failed for its first reason.
func (s *Server) Exited(rank int, how string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rank < 0 || rank >= s.cfg.WorldSize || s.ranks[rank] != nil || s.welcomed || s.closing {
		return
	}
	if slices.ContainsFunc(s.exited, func(x ExitedRank) bool { return x.Rank == rank }) {
		return
	}
	s.exited = append(s.exited, ExitedRank{Rank: rank, How: how})
	if s.joined > 0 {
		s.failLocked(s.exitedErrorLocked(-1))
	}
}

// exitedErrorLocked is the rendezvous failure that ranks which ended before
// their hello cause; hello is a rank saying hello now (not yet counted as
// joined, not missing), or -1.
func (s *Server) exitedErrorLocked(hello int) error {
	missing := s.missingLocked(hello)
	return &RendezvousError{Missing: missing, Hosts: s.whereLocked(missing), Exited: slices.Clone(s.exited), Knob: s.cfg.TimeoutKnob}
}

// missingLocked lists the ranks that have not said hello, leaving out
// except (a rank saying hello now), or none when except is -1.
func (s *Server) missingLocked(except int) []int {
	var missing []int
	for r, p := range s.ranks {
		if p == nil && r != except {
			missing = append(missing, r)
		}
	}
	return missing
}

// SaidHello reports whether rank said hello to this hub: it was admitted
// (whether or not it is still connected), or turned away because the job
// had already failed, which then ended it too.
func (s *Server) SaidHello(rank int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return rank >= 0 && rank < len(s.saidHi) && s.saidHi[rank]
}

// Drain waits until every frame queued for a client has been handed to
// the kernel (or that client is gone). A rank that hosts the hub drains
// before Close, so its peers get their last results even if it exits first.
func (s *Server) Drain(ctx context.Context) error {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for {
		if s.idle() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("hub: draining: %w", ctx.Err())
		case <-t.C:
		}
	}
}

func (s *Server) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.ranks {
		if p != nil && !p.idle() {
			return false
		}
	}
	return true
}

// Close stops serving, closes every connection and removes the socket and
// the directory Listen made. It is idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.shutdown()
		s.mu.Lock()
		served := s.served
		s.mu.Unlock()
		if served {
			<-s.serveDone
		}
		s.wg.Wait()
		s.mu.Lock()
		for seq, c := range s.pending {
			c.release()
			delete(s.pending, seq)
		}
		s.mu.Unlock()
		var errs []error
		if s.tcp {
			s.closeErr = nil
			return
		}
		if err := os.Remove(s.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("hub: %w", err))
		}
		if s.dir != "" {
			if err := os.RemoveAll(s.dir); err != nil {
				errs = append(errs, fmt.Errorf("hub: %w", err))
			}
		}
		if s.owner != nil {
			_ = s.owner.Close() // after the removal: the lock keeps others off until then
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

func (s *Server) shutdown() {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	s.closing = true
	close(s.stop)
	conns := make([]*peer, 0, len(s.conns))
	for p := range s.conns {
		conns = append(conns, p)
	}
	s.mu.Unlock()
	_ = s.ln.Close()
	for _, p := range conns {
		p.close()
	}
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

func (s *Server) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, args...)
	}
}

func (s *Server) watchRendezvous() {
	defer s.wg.Done()
	select {
	case <-s.firstJoin:
	case <-s.failed:
		return
	case <-s.stop:
		return
	}
	t := time.NewTimer(s.cfg.RendezvousTimeout)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.welcome:
		return
	case <-s.failed:
		return
	case <-s.stop:
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.welcomed {
		return
	}
	missing := s.missingLocked(-1)
	s.failLocked(&RendezvousError{Missing: missing, Hosts: s.whereLocked(missing), After: s.cfg.RendezvousTimeout, Knob: s.cfg.TimeoutKnob})
}

// whereLocked is where each of ranks is expected to run, or nil when the
// host does not know.
func (s *Server) whereLocked(ranks []int) []string {
	if s.cfg.Where == nil || len(ranks) == 0 {
		return nil
	}
	hosts := make([]string, len(ranks))
	for i, r := range ranks {
		hosts[i] = s.cfg.Where(r)
	}
	return hosts
}

// hostLocked is the host rank said it runs on, in a TCP job ("" on one
// node).
func (s *Server) hostLocked(rank int) string {
	if !s.tcp || rank < 0 || rank >= len(s.hellos) {
		return ""
	}
	return s.hellos[rank].Hostname
}

// watchLiveness pings every admitted TCP rank a fifth of the liveness
// period after the last ping, and fails the job, naming the node, when a
// rank has been silent for the whole period.
func (s *Server) watchLiveness() {
	defer s.wg.Done()
	live := s.cfg.Liveness
	t := time.NewTicker(live / 5)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.stop:
			return
		case <-s.failed:
			return
		}
		s.mu.Lock()
		now := time.Now()
		var silent *peer
		for _, p := range s.ranks {
			if p == nil || s.left[p.rank] {
				continue
			}
			p.enqueue(&pingMsg{}, nil)
			if silent == nil && now.Sub(time.Unix(0, p.heard.Load())) >= live {
				silent = p
			}
		}
		if silent != nil {
			s.failLocked(s.nodeSilentLocked(silent, now))
		}
		s.mu.Unlock()
	}
}

// nodeSilentLocked is the failure of silent's node: it and every rank of
// the same host that has not been heard from for half the liveness period
// (a node that goes away takes all its connections with it).
func (s *Server) nodeSilentLocked(silent *peer, now time.Time) error {
	host := s.hellos[silent.rank].Hostname
	e := &NodeError{Host: host, Silent: s.cfg.Liveness}
	for _, p := range s.ranks {
		if p != nil && !s.left[p.rank] && s.hellos[p.rank].Hostname == host &&
			now.Sub(time.Unix(0, p.heard.Load())) >= s.cfg.Liveness/2 {
			e.Ranks = append(e.Ranks, p.rank)
		}
	}
	return e
}

// handle is the reading goroutine of one connection.
func (s *Server) handle(p *peer) {
	defer s.wg.Done()
	left := false
	defer func() {
		if left {
			// Results still queued for a rank that said goodbye go out
			// before its connection closes.
			p.closeWhenIdle()
		} else {
			p.close()
		}
		p.fc.releaseFDs()
		s.mu.Lock()
		delete(s.conns, p)
		s.mu.Unlock()
	}()

	if p.fc.remote() {
		p.who = p.fc.c.RemoteAddr().String()
		_ = p.fc.c.SetDeadline(time.Now().Add(s.helloTimeout))
		if !s.authenticate(p) {
			return
		}
	} else {
		cred, err := fdpass.PeerCred(p.fc.uc)
		if err != nil {
			s.logf("hub: refused a connection: %v", err)
			return
		}
		p.pid = int(cred.Pid)
		p.who = fmt.Sprintf("pid %d", p.pid)
		if int(cred.Uid) != s.uid {
			s.refuse(p, fmt.Sprintf("peer uid %d is not the hub's uid %d", cred.Uid, s.uid))
			return
		}
		_ = p.fc.c.SetReadDeadline(time.Now().Add(s.helloTimeout))
	}
	m, fds, err := p.fc.readMessage()
	fdpass.Close(fds)
	if err != nil {
		if !s.isClosing() {
			s.refuse(p, fmt.Sprintf("no valid hello: %v", err))
		}
		return
	}
	h, ok := m.(*helloMsg)
	if !ok {
		s.refuse(p, fmt.Sprintf("expected a hello frame, got %s", m.typ()))
		return
	}
	_ = p.fc.c.SetDeadline(time.Time{})
	p.fc.admit()
	// The liveness clock starts now: the handshake had its own deadline.
	p.heard.Store(time.Now().UnixNano())
	stay, reply := s.admit(p, h.h)
	if !stay {
		p.sendNow(reply)
		return
	}
	left = s.readLoop(p)
}

// authenticate runs the hub's side of the TCP handshake: a fresh
// challenge, the client's proof that it knows the job secret, and the
// hub's proof to it. It reports whether the connection may say hello; a
// refusal is logged and told.
func (s *Server) authenticate(p *peer) bool {
	var ch challengeMsg
	if _, err := rand.Read(ch.nonce[:]); err != nil {
		s.logf("hub: refused connection from %s: no randomness for its challenge: %v", p.who, err)
		return false
	}
	if err := p.fc.writeMessage(&ch, nil); err != nil {
		if !s.isClosing() {
			s.logf("hub: refused connection from %s: sending the challenge: %v", p.who, err)
		}
		return false
	}
	m, fds, err := p.fc.readMessage()
	fdpass.Close(fds)
	if err != nil {
		if !s.isClosing() {
			s.refuse(p, fmt.Sprintf("no valid proof of the job secret: %v", err))
		}
		return false
	}
	pr, ok := m.(*proofMsg)
	if !ok {
		s.refuse(p, fmt.Sprintf("expected a proof of the job secret, got a %s frame", m.typ()))
		return false
	}
	if !hmac.Equal(proofMAC(s.cfg.Secret, roleClient, ch.nonce, pr.nonce), pr.mac[:]) {
		s.refuse(p, wrongSecret)
		return false
	}
	var ok2 proofOKMsg
	copy(ok2.mac[:], proofMAC(s.cfg.Secret, roleHub, pr.nonce, ch.nonce))
	if err := p.fc.writeMessage(&ok2, nil); err != nil {
		if !s.isClosing() {
			s.logf("hub: refused connection from %s: sending the hub's proof: %v", p.who, err)
		}
		return false
	}
	return true
}

// refuse tells a connection why it is turned away, logs it, and leaves the
// closing to handle.
func (s *Server) refuse(p *peer, reason string) {
	s.logf("hub: refused connection from %s: %s", p.who, reason)
	p.sendNow(&failMsg{code: failRefused, rank: -1, reason: reason})
}

// admit checks a hello and registers the rank. It reports whether the
// connection stays, and if not, what to tell it.
func (s *Server) admit(p *peer, h Hello) (bool, message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var reason string
	switch n := s.cfg.WorldSize; {
	case s.closing:
		reason = "the hub is shutting down"
	case subtle.ConstantTimeCompare([]byte(h.Token), []byte(s.cfg.Token)) != 1:
		reason = fmt.Sprintf("wrong job token from rank %d", h.Rank)
	case h.WorldSize != n:
		reason = fmt.Sprintf("rank %d says world size %d, the job has %d", h.Rank, h.WorldSize, n)
	case h.Rank < 0 || h.Rank >= n:
		reason = fmt.Sprintf("rank %d out of range [0,%d)", h.Rank, n)
	case s.ranks[h.Rank] != nil:
		reason = fmt.Sprintf("rank %d is already connected (pid %d)", h.Rank, s.ranks[h.Rank].pid)
	}
	if reason != "" {
		s.logf("hub: refused connection from %s: %s", p.who, reason)
		return false, &failMsg{code: failRefused, rank: -1, reason: reason}
	}
	if s.failure == nil && len(s.exited) > 0 {
		// A rank ended before its hello: this rendezvous can never
		// complete, so the first rank to say hello fails it.
		s.failLocked(s.exitedErrorLocked(h.Rank))
	}
	if s.failure != nil {
		// A latecomer to a failed job learns why instead of waiting.
		s.saidHi[h.Rank] = true
		return false, s.failWire
	}
	s.saidHi[h.Rank] = true
	h.Token = ""
	p.rank = h.Rank
	s.ranks[h.Rank] = p
	s.hellos[h.Rank] = h
	s.joined++
	if s.joined == 1 {
		close(s.firstJoin)
	}
	s.wg.Add(1)
	go p.writeLoop()
	if s.joined == s.cfg.WorldSize {
		s.welcomed = true
		close(s.welcome)
		w := &welcomeMsg{peers: slices.Clone(s.hellos)}
		for _, q := range s.ranks {
			q.enqueue(w, nil)
		}
	}
	return true, nil
}

// readLoop serves an admitted rank until it leaves (true) or its
// connection ends (false).
func (s *Server) readLoop(p *peer) bool {
	for {
		m, fds, err := p.fc.readMessage()
		if err != nil {
			s.lost(p.rank, err)
			return false
		}
		p.heard.Store(time.Now().UnixNano())
		switch m := m.(type) {
		case *pingMsg:
		case *opMsg:
			s.op(p.rank, m, fds)
		case *abortMsg:
			// Logged, unlike the launcher's Abort: nobody else reports a
			// rank's own reason (a collective it gave up on, its program's
			// Group.Abort).
			fdpass.Close(fds)
			s.mu.Lock()
			s.failLocked(&RankError{Rank: p.rank, Host: s.hostLocked(p.rank), Reason: "aborted: " + m.reason})
			s.mu.Unlock()
		case *byeMsg:
			// Nothing may follow a goodbye; the client waits for the
			// connection to close, which tells it the hub has seen it go.
			fdpass.Close(fds)
			s.leave(p.rank)
			return true
		default:
			fdpass.Close(fds)
			s.mu.Lock()
			s.failLocked(&RankError{Rank: p.rank, Host: s.hostLocked(p.rank), Reason: fmt.Sprintf("sent an unexpected %s frame", m.typ())})
			s.mu.Unlock()
			return false
		}
	}
}

// lost handles the end of a rank's connection.
func (s *Server) lost(rank int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || s.left[rank] {
		return
	}
	var reason string
	switch {
	case (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) && s.tcp:
		reason = "connection lost (the process exited or was killed, or its node went down)"
	case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET):
		reason = "connection lost (the process exited or was killed)"
	case errors.Is(err, ErrProtocol):
		reason = fmt.Sprintf("sent a malformed frame: %v", err)
	default:
		reason = fmt.Sprintf("connection lost: %v", err)
	}
	s.failLocked(&RankError{Rank: rank, Host: s.hostLocked(rank), Reason: reason})
}

// leave records a clean goodbye. A rank may leave once its part is done;
// only a collective it will now never join fails the job.
func (s *Server) leave(rank int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.left[rank] {
		return
	}
	s.left[rank] = true
	s.lastSeq[rank] = s.nextSeq[rank] - 1
	for _, c := range s.pending {
		if c.seq > s.lastSeq[rank] {
			s.failLocked(s.leftError(rank, c.first, c.kind, c.seq))
			return
		}
	}
}

func (s *Server) leftError(gone, waiter int, kind opKind, seq uint64) error {
	return &RankError{Rank: gone, Left: true, Reason: fmt.Sprintf(
		"closed its connection after collective #%d while rank %d waits in %s #%d",
		s.lastSeq[gone], waiter, kind, seq)}
}

// op records one rank's arrival at a collective and completes it when it
// is the last.
func (s *Server) op(rank int, m *opMsg, fds []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fail := func(reason string, args ...any) {
		fdpass.Close(fds)
		s.failLocked(&RankError{Rank: rank, Host: s.hostLocked(rank), Reason: fmt.Sprintf(reason, args...)})
	}
	if s.failure != nil || s.closing {
		// The client learns the failure from the fail frame already queued.
		fdpass.Close(fds)
		return
	}
	switch {
	case !s.welcomed:
		fail("sent %s before the rendezvous completed", m.kind)
		return
	case s.left[rank]:
		fail("sent %s after closing", m.kind)
		return
	case m.seq != s.nextSeq[rank]:
		fail("sent %s as collective #%d, expected #%d", m.kind, m.seq, s.nextSeq[rank])
		return
	}
	s.nextSeq[rank]++
	if !m.kind.hasRoot() {
		m.root = 0
	}
	if reason := s.checkOp(rank, m, len(fds)); reason != "" {
		fail("%s #%d: %s", m.kind, m.seq, reason)
		return
	}
	for q, gone := range s.left {
		if gone && s.lastSeq[q] < m.seq {
			fdpass.Close(fds)
			s.failLocked(s.leftError(q, rank, m.kind, m.seq))
			return
		}
	}
	c := s.pending[m.seq]
	if c == nil {
		n := s.cfg.WorldSize
		c = &collective{seq: m.seq, kind: m.kind, root: m.root, first: rank,
			in: make([]bool, n), data: make([][]byte, n), fds: make([][]int, n)}
		s.pending[m.seq] = c
	} else if c.kind != m.kind || c.root != m.root {
		fail("called %s as collective #%d while rank %d called %s", describe(m.kind, m.root), m.seq, c.first, describe(c.kind, c.root))
		return
	}
	c.in[rank] = true
	c.data[rank] = m.data
	c.fds[rank] = fds
	c.arrived++
	if c.arrived == s.cfg.WorldSize {
		delete(s.pending, c.seq)
		s.completeLocked(c)
		return
	}
	s.armLocked(c, m.timeout)
}

// armLocked moves c's deadline to this arrival's, when that comes first:
// a collective waits no longer than the least patient rank in it allows.
func (s *Server) armLocked(c *collective, timeout time.Duration) {
	if timeout <= 0 {
		timeout = s.cfg.CollectiveTimeout
	}
	dl := time.Now().Add(timeout)
	if c.timer != nil && !dl.Before(c.deadline) {
		return
	}
	c.deadline, c.limit = dl, timeout
	if c.timer == nil {
		c.timer = time.AfterFunc(timeout, func() { s.collectiveTimedOut(c) })
	} else {
		c.timer.Reset(timeout)
	}
}

// collectiveTimedOut fails the job when c is still waiting at its
// deadline, naming the ranks that never joined it.
func (s *Server) collectiveTimedOut(c *collective) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || s.failure != nil || s.pending[c.seq] != c {
		return
	}
	if time.Now().Before(c.deadline) {
		return // a later arrival moved the deadline; its timer fires then
	}
	e := &CollectiveTimeoutError{Collective: c.kind.String(), Seq: c.seq, After: c.limit, Knob: s.cfg.CollectiveTimeoutKnob}
	for r, in := range c.in {
		if in {
			continue
		}
		e.Missing = append(e.Missing, r)
		e.Hosts = append(e.Hosts, s.hellos[r].Hostname)
		e.PIDs = append(e.PIDs, s.hellos[r].PID)
	}
	s.failLocked(e)
}

func describe(k opKind, root int) string {
	if k.hasRoot() {
		return fmt.Sprintf("%s(root %d)", k, root)
	}
	return k.String()
}

// checkOp validates a call's arguments; it returns why it is invalid, or "".
func (s *Server) checkOp(rank int, m *opMsg, nfds int) string {
	n := s.cfg.WorldSize
	if m.kind.hasRoot() && (m.root < 0 || m.root >= n) {
		return fmt.Sprintf("root %d out of range [0,%d)", m.root, n)
	}
	if s.tcp && (m.kind == opAllGatherFDs || m.kind == opBroadcastFDs) {
		return "descriptors do not cross nodes, and this job's ranks reach the hub over TCP"
	}
	wantFDs, dataOK := 0, len(m.data) == 0
	switch m.kind {
	case opAllGather:
		dataOK = len(m.data) <= MaxBlob(n)
	case opBroadcast:
		dataOK = len(m.data) == 0 || (rank == m.root && len(m.data) <= MaxBlob(1))
	case opAllGatherFDs:
		wantFDs = 1
	case opBroadcastFDs:
		if rank == m.root {
			wantFDs = nfds
		}
	}
	if nfds != wantFDs {
		return fmt.Sprintf("sent %d descriptors, expected %d", nfds, wantFDs)
	}
	if !dataOK {
		return fmt.Sprintf("sent %d bytes of data, which this call does not take", len(m.data))
	}
	return ""
}

// completeLocked sends a finished collective's result to every rank.
func (s *Server) completeLocked(c *collective) {
	defer c.release()
	res := &resultMsg{seq: c.seq, kind: c.kind}
	var fds []int
	switch c.kind {
	case opAllGather:
		res.blobs = c.data
	case opBroadcast:
		res.blobs = [][]byte{c.data[c.root]}
	case opAllGatherFDs:
		for _, f := range c.fds {
			fds = append(fds, f...)
		}
	case opBroadcastFDs:
		fds = c.fds[c.root]
	}
	res.nfds = len(fds)
	b, err := encodeFrame(res)
	if err != nil {
		s.failLocked(&JobError{Reason: fmt.Sprintf("%s #%d: %v", c.kind, c.seq, err)})
		return
	}
	for r, p := range s.ranks {
		if s.left[r] {
			continue
		}
		// Each connection's writer owns (and closes) its own copies.
		dups, err := fdpass.DupAll(fds)
		if err != nil {
			s.failLocked(&JobError{Reason: fmt.Sprintf("%s #%d: duplicating descriptors for rank %d: %v", c.kind, c.seq, r, err)})
			return
		}
		p.enqueueFrame(b, dups)
	}
}

// failLocked records the job's first failure and tells every rank.
func (s *Server) failLocked(err error) {
	if s.failure == nil {
		s.logf("%v", err)
	}
	s.failQuietLocked(err)
}

// failQuietLocked is failLocked without the log line.
func (s *Server) failQuietLocked(err error) {
	if s.failure != nil {
		return
	}
	s.failure = err
	s.failWire = wireFailure(err)
	close(s.failed)
	for _, p := range s.ranks {
		if p != nil {
			p.enqueue(s.failWire, nil)
		}
	}
	for seq, c := range s.pending {
		c.release()
		delete(s.pending, seq)
	}
}

func wireFailure(err error) *failMsg {
	var re *RankError
	var rv *RendezvousError
	var je *JobError
	var ce *CollectiveTimeoutError
	var ne *NodeError
	switch {
	case errors.As(err, &re):
		f := &failMsg{code: failRank, rank: re.Rank, reason: re.Reason}
		if re.Host != "" {
			f.hosts = []string{re.Host}
		}
		return f
	case errors.As(err, &ne):
		return &failMsg{code: failNode, rank: -1, missing: ne.Ranks, after: ne.Silent, hosts: []string{ne.Host}}
	case errors.As(err, &ce):
		k, _ := parseOpKind(ce.Collective)
		return &failMsg{code: failCollective, rank: -1, reason: ce.Knob, missing: ce.Missing, after: ce.After,
			kind: k, seq: ce.Seq, hosts: ce.Hosts, pids: ce.PIDs}
	case errors.As(err, &rv):
		return &failMsg{code: failRendezvous, rank: -1, reason: rv.Knob, missing: rv.Missing, hosts: rv.Hosts, after: rv.After, exited: rv.Exited}
	case errors.As(err, &je):
		return &failMsg{code: failJob, rank: -1, reason: je.Reason}
	}
	return &failMsg{code: failJob, rank: -1, reason: err.Error()}
}

// err turns a fail frame back into the typed error it came from.
func (m *failMsg) err(path string) error {
	switch m.code {
	case failRefused:
		return &RefusedError{Path: path, Reason: m.reason}
	case failRank:
		e := &RankError{Rank: m.rank, Reason: m.reason}
		if len(m.hosts) > 0 {
			e.Host = m.hosts[0]
		}
		return e
	case failNode:
		return &NodeError{Host: m.hosts[0], Ranks: m.missing, Silent: m.after}
	case failRendezvous:
		return &RendezvousError{Missing: m.missing, Hosts: m.hosts, After: m.after, Exited: m.exited, Knob: m.reason}
	case failCollective:
		return &CollectiveTimeoutError{Collective: m.kind.String(), Seq: m.seq, Missing: m.missing,
			Hosts: m.hosts, PIDs: m.pids, After: m.after, Knob: m.reason}
	}
	return &JobError{Reason: m.reason}
}

// MaxBlob is the largest blob one rank may contribute to an all-gather in
// a job of n ranks, so that the result fits in one frame.
func MaxBlob(n int) int {
	if n < 1 {
		n = 1
	}
	return (MaxFrame-64)/n - 4
}

// peer is one connection on the server side: a reading goroutine (handle)
// and, once admitted, a writing goroutine with an unbounded queue, so that
// a slow reader never blocks the hub.
type peer struct {
	s    *Server
	fc   *frameConn
	rank int    // -1 until admitted; set under s.mu
	pid  int    // on a Unix socket
	who  string // for log lines: "pid 42", or a TCP peer's address
	// heard is when the last frame came (Unix nanoseconds), for the
	// liveness watch of a TCP hub.
	heard atomic.Int64

	mu        sync.Mutex
	out       []outFrame
	writing   bool
	finishing bool // close once the queue is empty
	closed    bool
	wake      chan struct{}
	done      chan struct{}
}

type outFrame struct {
	b   []byte
	fds []int // owned by the queue
}

func (p *peer) enqueue(m message, fds []int) {
	b, err := encodeFrame(m)
	if err != nil {
		fdpass.Close(fds)
		p.s.logf("hub: rank %d: %v", p.rank, err)
		return
	}
	p.enqueueFrame(b, fds)
}

func (p *peer) enqueueFrame(b []byte, fds []int) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		fdpass.Close(fds)
		return
	}
	p.out = append(p.out, outFrame{b: b, fds: fds})
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *peer) idle() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed || (len(p.out) == 0 && !p.writing)
}

func (p *peer) writeLoop() {
	defer p.s.wg.Done()
	for {
		select {
		case <-p.wake:
		case <-p.done:
			return
		}
		for {
			p.mu.Lock()
			if p.closed || len(p.out) == 0 {
				p.writing = false
				finishing := p.finishing
				p.mu.Unlock()
				if finishing {
					p.close()
					return
				}
				break
			}
			f := p.out[0]
			p.out[0] = outFrame{}
			p.out = p.out[1:]
			p.writing = true
			p.mu.Unlock()
			err := p.fc.writeFrame(f.b, f.fds)
			fdpass.Close(f.fds)
			if err != nil {
				// The reading side sees the broken connection and reports it.
				p.close()
				p.mu.Lock()
				p.writing = false
				p.mu.Unlock()
				return
			}
		}
	}
}

// sendNow writes one frame from the reading goroutine, before a writer
// exists (refusals), with a short deadline.
func (p *peer) sendNow(m message) {
	_ = p.fc.c.SetWriteDeadline(time.Now().Add(time.Second))
	// The connection is closed right after; the peer may already be gone.
	_ = p.fc.writeMessage(m, nil)
}

// closeWhenIdle closes the connection once its queue is written.
func (p *peer) closeWhenIdle() {
	p.mu.Lock()
	p.finishing = true
	idle := len(p.out) == 0 && !p.writing
	p.mu.Unlock()
	if idle {
		p.close()
		return
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *peer) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	q := p.out
	p.out = nil
	p.mu.Unlock()
	close(p.done)
	_ = p.fc.c.Close()
	for _, f := range q {
		fdpass.Close(f.fds)
	}
}
