package hub

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// sampleMessages returns one message of every type with fresh random
// contents, so a codec that drops or swaps a field cannot pass by luck.
func sampleMessages(rng *rand.Rand) []message {
	blobN := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return b
	}
	blob := func() []byte { return blobN(1 + rng.IntN(40)) }
	hello := func(token bool) Hello {
		h := Hello{
			Rank: rng.IntN(8), WorldSize: 8, LocalRank: rng.IntN(8), PID: 1 + rng.IntN(1<<22),
			Hostname: "node-" + string(rune('a'+rng.IntN(26))), Device: "GPU-" + string(rune('0'+rng.IntN(10))),
		}
		if token {
			h.Token = string(blob())
		}
		return h
	}
	return []message{
		&helloMsg{h: hello(true)},
		&welcomeMsg{peers: []Hello{hello(false), hello(false), hello(false)}},
		&failMsg{code: failRank, rank: rng.IntN(8), reason: "connection lost"},
		&failMsg{code: failRendezvous, rank: -1, missing: []int{2, 3}, after: time.Duration(1 + rng.Int64N(1e12))},
		&failMsg{code: failRendezvous, rank: -1, reason: "tprun --rendezvous-timeout", missing: []int{1, 3},
			exited: []ExitedRank{{Rank: 1 + rng.IntN(7), How: "exit status " + string(rune('0'+rng.IntN(10)))}, {Rank: 3, How: "killed by signal SIGKILL"}}},
		&failMsg{code: failRefused, rank: -1, reason: "wrong job token"},
		&failMsg{code: failCollective, rank: -1, reason: "TPRUN_COLLECTIVE_TIMEOUT", missing: []int{rng.IntN(8), 9},
			after: time.Duration(1 + rng.Int64N(1e12)), kind: opBroadcastFDs, seq: rng.Uint64(),
			hosts: []string{"node-" + string(blob()), ""}, pids: []int{1 + rng.IntN(1<<22), 7}},
		&failMsg{code: failNode, rank: -1, missing: []int{4, 5, 6 + rng.IntN(9)}, after: time.Duration(1 + rng.Int64N(1e12)), hosts: []string{"node-" + string(blob())}},
		&failMsg{code: failRank, rank: rng.IntN(8), reason: "connection lost", hosts: []string{"node-" + string(blob())}},
		&failMsg{code: failRendezvous, rank: -1, missing: []int{6, 7}, hosts: []string{"node-c", ""}, after: time.Duration(1 + rng.Int64N(1e12))},
		&challengeMsg{nonce: [nonceLen]byte(blobN(nonceLen))},
		&proofMsg{nonce: [nonceLen]byte(blobN(nonceLen)), mac: [macLen]byte(blobN(macLen))},
		&proofOKMsg{mac: [macLen]byte(blobN(macLen))},
		&pingMsg{},
		&opMsg{seq: rng.Uint64(), kind: opAllGather, root: 0, data: blob(), timeout: time.Duration(1 + rng.Int64N(1e12))},
		&opMsg{seq: rng.Uint64(), kind: opBroadcastFDs, root: rng.IntN(8), nfds: 1 + rng.IntN(MaxFDs)},
		&resultMsg{seq: rng.Uint64(), kind: opAllGather, blobs: [][]byte{blob(), nil, blob()}},
		&resultMsg{seq: rng.Uint64(), kind: opAllGatherFDs, nfds: 8},
		&abortMsg{reason: string(blob())},
		&byeMsg{},
	}
}

func TestFrameRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	for _, m := range sampleMessages(rng) {
		t.Run(m.typ().String(), func(t *testing.T) {
			b, err := encodeFrame(m)
			if err != nil {
				t.Fatal(err)
			}
			// Trailing bytes belong to the next frame and must be left alone.
			got, n, err := decodeFrame(append(b, 0xEE, 0xEE))
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if n != len(b) {
				t.Errorf("decode used %d bytes, frame has %d", n, len(b))
			}
			if !reflect.DeepEqual(got, m) {
				t.Errorf("round trip:\n got %#v\nwant %#v", got, m)
			}
		})
	}
}

// frame builds raw frame bytes with a chosen header, for the error cases.
func frame(version byte, typ msgType, payload []byte, length int) []byte {
	b := []byte{'T', 'P', 'H', version, 0, 0, 0, 0, byte(typ)}
	binary.BigEndian.PutUint32(b[4:8], uint32(length))
	return append(b, payload...)
}

func TestDecodeFrameErrors(t *testing.T) {
	good, err := encodeFrame(&opMsg{seq: 7, kind: opAllGather, data: []byte("hello")})
	if err != nil {
		t.Fatal(err)
	}
	p := good[headerLen:]
	withKind := func(k byte) []byte {
		q := bytes.Clone(p)
		q[8] = k
		return frame(Version, msgOp, q, len(q))
	}
	withNFDs := func(n uint32) []byte {
		q := bytes.Clone(p)
		binary.BigEndian.PutUint32(q[len(q)-12:], n)
		return frame(Version, msgOp, q, len(q))
	}
	withTimeout := func(d uint64) []byte {
		q := bytes.Clone(p)
		binary.BigEndian.PutUint64(q[len(q)-8:], d)
		return frame(Version, msgOp, q, len(q))
	}
	// fail encodes m without the decoder's checks, for the cases it must
	// refuse.
	fail := func(m failMsg) []byte {
		b, err := encodeFrame(&m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// A fail frame's fixed start: code failRendezvous, rank -1, no reason,
	// no missing ranks, after 0; then an exited count.
	failStart := append([]byte{byte(failRendezvous), 0xFF, 0xFF, 0xFF, 0xFF}, make([]byte, 4+4+8)...)
	cases := []struct {
		desc string
		in   []byte
		want string
	}{
		{"empty input", nil, "truncated header"},
		{"short header", good[:5], "truncated header"},
		{"bad magic", append([]byte("XPH"), good[3:]...), "bad magic"},
		{"other version", frame(Version+1, msgOp, p, len(p)), "version"},
		{"version zero", frame(0, msgOp, p, len(p)), "version"},
		{"oversize length", frame(Version, msgOp, nil, MaxFrame+1), "exceeds the limit"},
		{"huge length", frame(Version, msgOp, nil, 0xFFFFFFFF), "exceeds the limit"},
		{"unknown type zero", frame(Version, 0, p, len(p)), "unknown frame type"},
		{"unknown type 200", frame(Version, 200, p, len(p)), "unknown frame type"},
		{"truncated payload", good[:len(good)-3], "truncated op frame"},
		{"length shorter than fields", frame(Version, msgOp, p[:10], 10), "truncated"},
		{"trailing bytes in payload", frame(Version, msgOp, append(bytes.Clone(p), 1), len(p)+1), "trailing"},
		{"unknown op kind", withKind(99), "unknown operation"},
		{"op kind zero", withKind(0), "unknown operation"},
		{"too many descriptors", withNFDs(MaxFDs + 1), "descriptors exceed"},
		{"negative timeout", withTimeout(1 << 63), "negative collective timeout"},
		{"collective timeout without missing ranks", fail(failMsg{code: failCollective, rank: -1, kind: opBarrier, seq: 3}), "without missing ranks"},
		{"collective timeout without its collective", fail(failMsg{code: failCollective, rank: -1, missing: []int{1}, hosts: []string{"a"}, pids: []int{2}}), "without missing ranks or collective"},
		{"collective timeout without hosts", fail(failMsg{code: failCollective, rank: -1, kind: opBarrier, missing: []int{1, 2}, pids: []int{5, 6}}), "0 hosts and 2 pids for 2 missing"},
		{"node failure without its host", fail(failMsg{code: failNode, rank: -1, missing: []int{4, 5}}), "node failure without"},
		{"node failure without ranks", fail(failMsg{code: failNode, rank: -1, hosts: []string{"node-b"}}), "node failure without"},
		{"rendezvous hosts that do not match", fail(failMsg{code: failRendezvous, rank: -1, missing: []int{4, 5}, hosts: []string{"b"}}), "1 hosts for 2 missing"},
		{"unknown operation in a fail frame", func() []byte {
			b := fail(failMsg{code: failJob, rank: -1, kind: opBarrier})
			b[len(b)-4-4-8-1] = 99
			return b
		}(), "unknown operation"},
		{"truncated fail frame", frame(Version, msgFail, failStart, len(failStart)), "truncated"},
		{"forged exited count", frame(Version, msgFail, append(bytes.Clone(failStart), 0, 0, 1, 0), len(failStart)+4), "does not fit"},
		{"challenge too short", frame(Version, msgChallenge, make([]byte, nonceLen-1), nonceLen-1), "truncated"},
		{"proof too long", frame(Version, msgProof, make([]byte, nonceLen+macLen+1), nonceLen+macLen+1), "trailing"},
		{"ping with payload", frame(Version, msgPing, []byte{0}, 1), "trailing"},
		{"forged blob count", frame(Version, msgResult, []byte{0, 0, 0, 0, 0, 0, 0, 1, 2, 0xFF, 0xFF, 0xFF, 0xFF}, 13), "does not fit"},
		{"forged welcome count", frame(Version, msgWelcome, []byte{0x7F, 0xFF, 0xFF, 0xFF}, 4), "does not fit"},
		{"forged string length", frame(Version, msgAbort, []byte{0xFF, 0xFF, 0xFF, 0xF0, 'x'}, 5), "truncated"},
		{"unknown failure code", frame(Version, msgFail, []byte{9, 0, 0, 0, 0}, 5), "unknown failure code"},
		{"bye with payload", frame(Version, msgBye, []byte{1}, 1), "trailing"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			m, n, err := decodeFrame(tc.in)
			if err == nil {
				t.Fatalf("decoded %#v (%d bytes), want an error containing %q", m, n, tc.want)
			}
			if !errors.Is(err, ErrProtocol) {
				t.Errorf("error %v is not ErrProtocol", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestEncodeFrameTooLarge(t *testing.T) {
	_, err := encodeFrame(&opMsg{seq: 1, kind: opAllGather, data: make([]byte, MaxFrame)})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
	// The largest blob an all-gather allows must fit, result included.
	for _, n := range []int{1, 2, 8, MaxWorldSize} {
		blobs := make([][]byte, n)
		for i := range blobs {
			blobs[i] = make([]byte, MaxBlob(n))
		}
		if _, err := encodeFrame(&resultMsg{seq: 1, kind: opAllGather, blobs: blobs}); err != nil {
			t.Errorf("n=%d: result of MaxBlob blobs: %v", n, err)
		}
	}
}

// FuzzDecodeFrame feeds arbitrary bytes to the decoder: it must never
// panic, and whatever it accepts must re-encode to exactly the bytes it
// consumed (the encoding is canonical).
func FuzzDecodeFrame(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, m := range sampleMessages(rng) {
		b, err := encodeFrame(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
		c := bytes.Clone(b)
		c[len(c)-1] ^= 0xFF
		f.Add(c)
	}
	f.Add([]byte{})
	f.Add([]byte("TPH\x02\xff\xff\xff\xff\x04"))
	f.Add(frame(Version, msgResult, []byte{0, 0, 0, 0, 0, 0, 0, 1, 2, 0xFF, 0xFF, 0xFF, 0xFF}, 13))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, n, err := decodeFrame(b)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %v is not ErrProtocol", err)
			}
			return
		}
		if n > len(b) {
			t.Fatalf("used %d of %d bytes", n, len(b))
		}
		again, err := encodeFrame(m)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if !bytes.Equal(again, b[:n]) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", b[:n], again)
		}
	})
}
