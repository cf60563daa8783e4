package hub

import (
	"encoding/binary"
	"fmt"
	"time"
)

// Wire format. Every frame is
//
//	magic "TPH" | version (1 byte) | payload length (uint32 BE) | type (1 byte) | payload
//
// Integers in payloads are big-endian and fixed-width, byte strings are a
// uint32 length followed by the bytes, and a payload must be consumed
// exactly: the encoding of a message is unique, which the fuzz targets use
// (decode, re-encode, compare). Descriptors travel as SCM_RIGHTS with the
// first byte of the frame that announces them (its nfds field), on the
// Unix socket only.
//
// Over TCP (ranks on several nodes) the same frames travel, and the hub
// speaks first: a challenge with its nonce; the client answers with its
// own nonce and an HMAC-SHA256 of both under the job secret (proof), the
// hub answers with its own HMAC (proofOK), and only then comes the hello.
// Until the hello is admitted a frame may carry at most MaxHandshakeFrame
// bytes; afterwards both ends send pings when they have been quiet, so
// that silence means a dead or cut-off node.
const (
	// Version of the wire format; a frame with another version is refused.
	// 2: an op carries its collective timeout, a fail frame may report a
	// collective that timed out.
	Version = 2
	// MaxFrame is the largest payload a frame may carry.
	MaxFrame = 4 << 20
	// MaxFDs is the most descriptors one frame may carry (the kernel's
	// SCM_MAX_FD is 253).
	MaxFDs = 250
	// MaxWorldSize is the largest job: an all-gather of descriptors moves
	// one per rank in one frame.
	MaxWorldSize = MaxFDs
	// MaxHandshakeFrame bounds a frame from a TCP peer that has not yet
	// been admitted: whoever can reach the port cannot make the hub read
	// or buffer more than this before proving the job secret.
	MaxHandshakeFrame = 4 << 10
	// nonceLen and macLen: the sizes in the TCP handshake.
	nonceLen = 32
	macLen   = 32

	headerLen = 9
)

var magic = [3]byte{'T', 'P', 'H'}

type msgType uint8

const (
	msgHello     msgType = iota + 1 // client → server: who I am
	msgWelcome                      // server → client: everyone is here
	msgFail                         // server → client: refused, or the job failed
	msgOp                           // client → server: a collective call
	msgResult                       // server → client: a collective's result
	msgAbort                        // client → server: fail the job, blaming me
	msgBye                          // client → server: I leave cleanly
	msgChallenge                    // server → client (TCP): my nonce
	msgProof                        // client → server (TCP): my nonce and my MAC
	msgProofOK                      // server → client (TCP): the hub's MAC
	msgPing                         // either way (TCP): still here
)

func (t msgType) String() string {
	switch t {
	case msgHello:
		return "hello"
	case msgWelcome:
		return "welcome"
	case msgFail:
		return "fail"
	case msgOp:
		return "op"
	case msgResult:
		return "result"
	case msgAbort:
		return "abort"
	case msgBye:
		return "bye"
	case msgChallenge:
		return "challenge"
	case msgProof:
		return "proof"
	case msgProofOK:
		return "proofOK"
	case msgPing:
		return "ping"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// opKind is the collective a call belongs to; all ranks must call the same
// kind (and root) at the same sequence number.
type opKind uint8

const (
	opBarrier opKind = iota + 1
	opAllGather
	opBroadcast
	opAllGatherFDs
	opBroadcastFDs
)

func (k opKind) String() string {
	switch k {
	case opBarrier:
		return "Barrier"
	case opAllGather:
		return "AllGather"
	case opBroadcast:
		return "Broadcast"
	case opAllGatherFDs:
		return "AllGatherFDs"
	case opBroadcastFDs:
		return "BroadcastFDs"
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// parseOpKind is String's inverse.
func parseOpKind(name string) (opKind, bool) {
	for k := opBarrier; k <= opBroadcastFDs; k++ {
		if k.String() == name {
			return k, true
		}
	}
	return 0, false
}

func (k opKind) valid() bool { return k >= opBarrier && k <= opBroadcastFDs }

// hasRoot reports whether the kind has a root rank.
func (k opKind) hasRoot() bool { return k == opBroadcast || k == opBroadcastFDs }

type failCode uint8

const (
	failRefused    failCode = iota + 1 // this connection was refused
	failRank                           // a rank is to blame
	failRendezvous                     // ranks never arrived
	failJob                            // no single rank is to blame
	failCollective                     // ranks never joined a collective in time
	failNode                           // a node's ranks went silent
)

// message is one decoded frame.
type message interface {
	typ() msgType
	encode(e *encoder)
	decode(d *decoder)
	// fdCount is how many descriptors travel with the frame.
	fdCount() int
}

type helloMsg struct{ h Hello }

type welcomeMsg struct{ peers []Hello }

// failMsg carries every kind of failure; the fields a code does not use
// are empty.
type failMsg struct {
	code    failCode
	rank    int    // failRank: the rank to blame; else -1
	reason  string // failRendezvous, failCollective: the timeout's knob
	missing []int  // failRendezvous, failCollective: the missing ranks; failNode: the node's ranks
	after   time.Duration
	exited  []ExitedRank // failRendezvous: ranks that ended before their hello

	// failCollective: the collective.
	kind opKind
	seq  uint64
	// hosts: failRank, failNode: the host (one entry, or none);
	// failRendezvous, failCollective: where each missing rank runs
	// ("" when not known), index-aligned with missing.
	hosts []string
	pids  []int // failCollective: index-aligned with missing
}

type opMsg struct {
	seq  uint64
	kind opKind
	root int
	data []byte
	nfds int
	// timeout: how long this rank lets the collective wait for the others
	// once it has arrived; 0 leaves it to the hub's default.
	timeout time.Duration
}

type resultMsg struct {
	seq   uint64
	kind  opKind
	blobs [][]byte
	nfds  int
}

type abortMsg struct{ reason string }

type byeMsg struct{}

type challengeMsg struct{ nonce [nonceLen]byte }

type proofMsg struct {
	nonce [nonceLen]byte
	mac   [macLen]byte
}

type proofOKMsg struct{ mac [macLen]byte }

type pingMsg struct{}

func (*helloMsg) typ() msgType     { return msgHello }
func (*welcomeMsg) typ() msgType   { return msgWelcome }
func (*failMsg) typ() msgType      { return msgFail }
func (*opMsg) typ() msgType        { return msgOp }
func (*resultMsg) typ() msgType    { return msgResult }
func (*abortMsg) typ() msgType     { return msgAbort }
func (*byeMsg) typ() msgType       { return msgBye }
func (*challengeMsg) typ() msgType { return msgChallenge }
func (*proofMsg) typ() msgType     { return msgProof }
func (*proofOKMsg) typ() msgType   { return msgProofOK }
func (*pingMsg) typ() msgType      { return msgPing }

func (*helloMsg) fdCount() int     { return 0 }
func (*welcomeMsg) fdCount() int   { return 0 }
func (*failMsg) fdCount() int      { return 0 }
func (m *opMsg) fdCount() int      { return m.nfds }
func (m *resultMsg) fdCount() int  { return m.nfds }
func (*abortMsg) fdCount() int     { return 0 }
func (*byeMsg) fdCount() int       { return 0 }
func (*challengeMsg) fdCount() int { return 0 }
func (*proofMsg) fdCount() int     { return 0 }
func (*proofOKMsg) fdCount() int   { return 0 }
func (*pingMsg) fdCount() int      { return 0 }

func newMessage(t msgType) (message, error) {
	switch t {
	case msgHello:
		return &helloMsg{}, nil
	case msgWelcome:
		return &welcomeMsg{}, nil
	case msgFail:
		return &failMsg{}, nil
	case msgOp:
		return &opMsg{}, nil
	case msgResult:
		return &resultMsg{}, nil
	case msgAbort:
		return &abortMsg{}, nil
	case msgBye:
		return &byeMsg{}, nil
	case msgChallenge:
		return &challengeMsg{}, nil
	case msgProof:
		return &proofMsg{}, nil
	case msgProofOK:
		return &proofOKMsg{}, nil
	case msgPing:
		return &pingMsg{}, nil
	}
	return nil, fmt.Errorf("%w: unknown frame type %d", ErrProtocol, uint8(t))
}

// encodeFrame returns the complete frame for m.
func encodeFrame(m message) ([]byte, error) {
	e := encoder{b: make([]byte, headerLen, 64)}
	m.encode(&e)
	n := len(e.b) - headerLen
	if n > MaxFrame {
		return nil, fmt.Errorf("%w: %s frame of %d bytes exceeds the limit of %d", ErrTooLarge, m.typ(), n, MaxFrame)
	}
	copy(e.b, magic[:])
	e.b[3] = Version
	binary.BigEndian.PutUint32(e.b[4:8], uint32(n))
	e.b[8] = byte(m.typ())
	return e.b, nil
}

// parseHeader checks a frame header and returns the type and payload
// length. It rejects a bad magic, another version, a length over limit and
// an unknown type before any payload is read.
func parseHeader(h []byte, limit int) (msgType, int, error) {
	if len(h) < headerLen {
		return 0, 0, fmt.Errorf("%w: truncated header (%d of %d bytes)", ErrProtocol, len(h), headerLen)
	}
	if h[0] != magic[0] || h[1] != magic[1] || h[2] != magic[2] {
		return 0, 0, fmt.Errorf("%w: bad magic %q", ErrProtocol, h[:3])
	}
	if h[3] != Version {
		return 0, 0, fmt.Errorf("%w: wire version %d, this build of tprun speaks %d (the launcher and every rank program must come from the same tprun release)", ErrProtocol, h[3], Version)
	}
	n := binary.BigEndian.Uint32(h[4:8])
	if uint64(n) > uint64(limit) {
		return 0, 0, fmt.Errorf("%w: frame of %d bytes exceeds the limit of %d", ErrProtocol, n, limit)
	}
	t := msgType(h[8])
	if _, err := newMessage(t); err != nil {
		return 0, 0, err
	}
	return t, int(n), nil
}

// decodePayload decodes the payload of a frame of type t.
func decodePayload(t msgType, p []byte) (message, error) {
	m, err := newMessage(t)
	if err != nil {
		return nil, err
	}
	d := decoder{b: p}
	m.decode(&d)
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: %s frame: %w", ErrProtocol, t, d.err)
	}
	return m, nil
}

// decodeFrame decodes the first frame in b and returns it with the number
// of bytes it used. A b shorter than the frame is an error (truncated).
func decodeFrame(b []byte) (message, int, error) {
	t, n, err := parseHeader(b, MaxFrame)
	if err != nil {
		return nil, 0, err
	}
	if len(b)-headerLen < n {
		return nil, 0, fmt.Errorf("%w: truncated %s frame (%d of %d payload bytes)", ErrProtocol, t, len(b)-headerLen, n)
	}
	m, err := decodePayload(t, b[headerLen:headerLen+n])
	if err != nil {
		return nil, 0, err
	}
	return m, headerLen + n, nil
}

// Payload encodings.

func (m *helloMsg) encode(e *encoder) { e.hello(m.h, true) }
func (m *helloMsg) decode(d *decoder) { m.h = d.hello(true) }

func (m *welcomeMsg) encode(e *encoder) {
	e.u32(uint32(len(m.peers)))
	for _, h := range m.peers {
		e.hello(h, false)
	}
}

func (m *welcomeMsg) decode(d *decoder) {
	n := d.count(helloMinLen)
	m.peers = make([]Hello, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		m.peers = append(m.peers, d.hello(false))
	}
}

func (m *failMsg) encode(e *encoder) {
	e.u8(uint8(m.code))
	e.i32(m.rank)
	e.str(m.reason)
	e.u32(uint32(len(m.missing)))
	for _, r := range m.missing {
		e.i32(r)
	}
	e.u64(uint64(m.after))
	e.u32(uint32(len(m.exited)))
	for _, x := range m.exited {
		e.i32(x.Rank)
		e.str(x.How)
	}
	e.u8(uint8(m.kind))
	e.u64(m.seq)
	e.u32(uint32(len(m.hosts)))
	for _, h := range m.hosts {
		e.str(h)
	}
	e.u32(uint32(len(m.pids)))
	for _, p := range m.pids {
		e.i32(p)
	}
}

func (m *failMsg) decode(d *decoder) {
	m.code = failCode(d.u8())
	if d.err == nil && (m.code < failRefused || m.code > failNode) {
		d.fail("unknown failure code %d", m.code)
	}
	m.rank = d.i32()
	m.reason = d.str()
	if n := d.count(4); n > 0 {
		m.missing = make([]int, n)
		for i := range m.missing {
			m.missing[i] = d.i32()
		}
	}
	m.after = time.Duration(d.u64())
	if n := d.count(4 + 4); n > 0 { // a rank and a string's length
		m.exited = make([]ExitedRank, n)
		for i := range m.exited {
			m.exited[i].Rank = d.i32()
			m.exited[i].How = d.str()
		}
	}
	if k := opKind(d.u8()); d.err == nil && k != 0 && !k.valid() {
		d.fail("unknown operation %d", uint8(k))
	} else {
		m.kind = k
	}
	m.seq = d.u64()
	if n := d.count(4); n > 0 {
		m.hosts = make([]string, n)
		for i := range m.hosts {
			m.hosts[i] = d.str()
		}
	}
	if n := d.count(4); n > 0 {
		m.pids = make([]int, n)
		for i := range m.pids {
			m.pids[i] = d.i32()
		}
	}
	if d.err != nil {
		return
	}
	switch {
	case m.code == failCollective && (len(m.missing) == 0 || m.kind == 0):
		d.fail("collective timeout without missing ranks or collective")
	case m.code == failCollective && (len(m.hosts) != len(m.missing) || len(m.pids) != len(m.missing)):
		d.fail("collective timeout with %d hosts and %d pids for %d missing ranks", len(m.hosts), len(m.pids), len(m.missing))
	case m.code == failNode && (len(m.missing) == 0 || len(m.hosts) != 1):
		d.fail("node failure without its host and ranks")
	case m.code == failRendezvous && len(m.hosts) != 0 && len(m.hosts) != len(m.missing):
		d.fail("rendezvous failure with %d hosts for %d missing ranks", len(m.hosts), len(m.missing))
	}
}

func (m *opMsg) encode(e *encoder) {
	e.u64(m.seq)
	e.u8(uint8(m.kind))
	e.i32(m.root)
	e.bytes(m.data)
	e.u32(uint32(m.nfds))
	e.u64(uint64(m.timeout))
}

func (m *opMsg) decode(d *decoder) {
	m.seq = d.u64()
	m.kind = d.kind()
	m.root = d.i32()
	m.data = d.bytes()
	m.nfds = d.nfds()
	m.timeout = time.Duration(d.u64())
	if d.err == nil && m.timeout < 0 {
		d.fail("negative collective timeout %d", int64(m.timeout))
	}
}

func (m *resultMsg) encode(e *encoder) {
	e.u64(m.seq)
	e.u8(uint8(m.kind))
	e.u32(uint32(len(m.blobs)))
	for _, b := range m.blobs {
		e.bytes(b)
	}
	e.u32(uint32(m.nfds))
}

func (m *resultMsg) decode(d *decoder) {
	m.seq = d.u64()
	m.kind = d.kind()
	n := d.count(4)
	if n > 0 {
		m.blobs = make([][]byte, n)
		for i := range m.blobs {
			m.blobs[i] = d.bytes()
		}
	}
	m.nfds = d.nfds()
}

func (m *abortMsg) encode(e *encoder) { e.str(m.reason) }
func (m *abortMsg) decode(d *decoder) { m.reason = d.str() }

func (*byeMsg) encode(*encoder) {}
func (*byeMsg) decode(*decoder) {}

func (m *challengeMsg) encode(e *encoder) { e.b = append(e.b, m.nonce[:]...) }
func (m *challengeMsg) decode(d *decoder) { copy(m.nonce[:], d.take(nonceLen)) }

func (m *proofMsg) encode(e *encoder) {
	e.b = append(e.b, m.nonce[:]...)
	e.b = append(e.b, m.mac[:]...)
}

func (m *proofMsg) decode(d *decoder) {
	copy(m.nonce[:], d.take(nonceLen))
	copy(m.mac[:], d.take(macLen))
}

func (m *proofOKMsg) encode(e *encoder) { e.b = append(e.b, m.mac[:]...) }
func (m *proofOKMsg) decode(d *decoder) { copy(m.mac[:], d.take(macLen)) }

func (*pingMsg) encode(*encoder) {}
func (*pingMsg) decode(*decoder) {}

// helloMinLen is the encoded size of a Hello without the token and with
// empty strings: four int32 and two string lengths.
const helloMinLen = 4*4 + 2*4

type encoder struct{ b []byte }

func (e *encoder) u8(v uint8)   { e.b = append(e.b, v) }
func (e *encoder) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *encoder) u64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }

// i32 stores an int that callers have range-checked (ranks, sizes, pids).
func (e *encoder) i32(v int) { e.u32(uint32(int32(v))) }

func (e *encoder) bytes(b []byte) {
	e.u32(uint32(len(b)))
	e.b = append(e.b, b...)
}

func (e *encoder) str(s string) {
	e.u32(uint32(len(s)))
	e.b = append(e.b, s...)
}

func (e *encoder) hello(h Hello, token bool) {
	e.i32(h.Rank)
	e.i32(h.WorldSize)
	e.i32(h.LocalRank)
	e.i32(h.PID)
	e.str(h.Hostname)
	e.str(h.Device)
	if token {
		e.str(h.Token)
	}
}

// decoder reads a payload; the first error sticks and later reads return
// zero values, so decode methods need no error checks of their own.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.fail("truncated: need %d bytes, have %d", n, len(d.b))
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) u8() uint8 {
	p := d.take(1)
	if p == nil {
		return 0
	}
	return p[0]
}

func (d *decoder) u32() uint32 {
	p := d.take(4)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint32(p)
}

func (d *decoder) u64() uint64 {
	p := d.take(8)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint64(p)
}

func (d *decoder) i32() int { return int(int32(d.u32())) }

// count reads an element count and rejects one that cannot fit in the
// rest of the payload, so a forged count never makes a huge allocation.
func (d *decoder) count(minElem int) int {
	n := d.u32()
	if d.err != nil {
		return 0
	}
	if uint64(n)*uint64(minElem) > uint64(len(d.b)) {
		d.fail("count %d does not fit in %d remaining bytes", n, len(d.b))
		return 0
	}
	return int(n)
}

func (d *decoder) bytes() []byte {
	n := d.u32()
	if d.err != nil {
		return nil
	}
	if uint64(n) > uint64(len(d.b)) {
		d.fail("truncated: byte string of %d, have %d", n, len(d.b))
		return nil
	}
	p := d.take(int(n))
	if len(p) == 0 {
		return nil
	}
	return append([]byte(nil), p...)
}

func (d *decoder) str() string { return string(d.bytes()) }

func (d *decoder) kind() opKind {
	k := opKind(d.u8())
	if d.err == nil && !k.valid() {
		d.fail("unknown operation %d", uint8(k))
	}
	return k
}

func (d *decoder) nfds() int {
	n := d.u32()
	if d.err == nil && n > MaxFDs {
		d.fail("%d descriptors exceed the limit of %d", n, MaxFDs)
		return 0
	}
	return int(n)
}

func (d *decoder) hello(token bool) Hello {
	var h Hello
	h.Rank = d.i32()
	h.WorldSize = d.i32()
	h.LocalRank = d.i32()
	h.PID = d.i32()
	h.Hostname = d.str()
	h.Device = d.str()
	if token {
		h.Token = d.str()
	}
	return h
}
