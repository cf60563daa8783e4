// Package mailbox implements the Lamport slot protocol that lets every rank
// of a tensor-parallel group end a step holding the whole [M, hidden] output
// block, and the backends that give every rank a view of every rank's
// mailbox memory. This file set holds the protocol, the shared types and the
// "host" backend (a memfd per rank, mapped by every rank process); the GPU
// backends ("unicast", "multicast") live in other files of this package
// behind the same Backend interface.
//
// # Memory layout
//
// A mailbox is Slots slots. A slot holds one own region for every row
// count m in 1..min(Capacity, OwnRegionRows), in that order: the region for
// m is m × Hidden bf16 elements. When Capacity is larger, one shared region
// of Capacity rows follows, used by every m past OwnRegionRows. A slot is
// SlotRows(Capacity) rows: 1+2+...+Capacity up to OwnRegionRows (8),
// 36+Capacity above (164 rows at Capacity 128, where a region per m would
// take 8256). A step of m rows uses the first m rows of its slot's region
// for m (Layout.StepOffset, Layout.RegionRows).
//
// What the regions guarantee when ranks pass different m for one step:
//
//   - If at least one of two differing m has an own region, the two store
//     into different regions and no rank finds a whole block: every receive
//     times out, and the *TimeoutError names the ranks found in another
//     region (OtherM). With one region shared by every m, the rank with the
//     smaller m would return a block, and the rows a peer stored past it
//     would stay in the slot, unarmed.
//   - If both are past OwnRegionRows they share the shared region. The
//     ranks with the largest m never find their rows past the smaller m, so
//     they time out at that step, naming the ranks that stored fewer rows
//     (OtherM). A rank with a smaller m finds every row it asked for and
//     may complete the step; its next step times out, since the ranks that
//     timed out never store again (a failed receive breaks the mailbox).
//     The rows a larger-m rank stored past the smaller m stay in the
//     smaller-m rank's slot unarmed, but no step can complete with them:
//     every later step also needs that rank's row 0, which the receive
//     re-armed and which that rank never stores again.
//
// So a mismatch is always an error, at that step on the ranks with the
// largest m and by the next step on every rank; no rank ever takes rows of
// another step for data. The own regions stop at OwnRegionRows because a
// region per m grows as Capacity squared, and because M up to
// OwnRegionRows is what the GPU skinny kernels store, so their offsets do
// not depend on Capacity.
//
// Each slot starts on a 64-byte boundary (Layout.SlotBytes is padded) so
// that a slot never shares a cache line with its neighbour. Element e of a
// region lives in 32-bit word e/2, in the low half when e is even and in
// the high half when e is odd (little-endian memory order, the same order
// a GPU kernel storing bf16 pairs produces). Rank r's slice for row m is
// the elements
// m*Hidden + r*Shard .. m*Hidden + r*Shard + Shard-1; Shard must be even so
// that no word holds elements of two ranks: two writers never touch the
// same word.
//
// # The protocol
//
// Every word starts as the sentinel 0x80000000 (+0 in the low element, -0 in
// the high element). A writer sanitizes every word it stores, turning each
// -0 half (0x8000) into +0 (0x0000), so it can never store the sentinel:
// "word == sentinel" reliably means "not written yet". Every store and load
// of a shared word is a single 32-bit atomic, so a reader sees either the
// sentinel or the writer's complete word, never half of one.
//
// Step t uses slot t mod Slots. On every rank a step is: Write(t) stores the
// rank's slice into slot t of every rank's mailbox; Receive(t) polls the
// local slot's region for M until no word of it is the sentinel,
// copies them out and stores the sentinel back into them ("re-arms"). Once a
// word is not the sentinel it stays final until this rank re-arms it, so the
// poll copies each word as soon as it has arrived and never looks back.
//
// # Why two slots suffice
//
// Rank p writes step t+1 into slot (t+1) mod S of rank q. With S = 2 that is
// the slot q used for step t-1; the write is harmless only if q has already
// copied and re-armed step t-1. It has: p issues Write(t+1) only after its
// own Receive(t) finished; that needed q's step-t slice, and q issued
// Write(t) only after its Receive(t-1) had copied and re-armed slot
// (t-1) mod S. Each link in that chain is an atomic store observed by an
// atomic load, so in Go's memory model (and on the hardware: x86 TSO, arm64
// release/acquire atomics) the re-arm happens before p's step-t+1 stores.
// With regions, the same chain covers steps of different m: step t+1 stores
// into the region for its own m (the first m rows of the shared one past
// OwnRegionRows), which the receives of that region's earlier uses
// re-armed (a slot's regions are armed at the start, and a step
// re-arms only the region it read), and which that receive finished before
// this rank's last write, so every region but the one a step is filling
// holds only the sentinel.
// With one slot the chain breaks: p could overwrite slot 0 with step t+1
// while q is still copying step t, so fewer than two slots are rejected.
// A third slot (the default) gives a backend room to defer the re-arm by a
// step, e.g. into the next kernel launch.
//
// The Host enforces the order that argument relies on: steps start at 0 and
// go up by one, Write(t) must precede Receive(t), and Write(t+1) is refused
// until Receive(t) has succeeded. All ranks must pass the same m for a step
// (see the memory layout for what happens when they do not).
// A Receive that failed (deadline, cancellation, Close) leaves the slot
// half-filled, so the Host refuses further steps (ErrBroken).
//
// # Backends
//
// Backend (Name, Layout, Close) is what every backend provides; Stepper
// (Write, Receive) is the CPU-driven half that the host backend provides.
// The GPU backends store from their kernels instead and expose slot
// addresses for them. Kind, ParseKind, MulticastBlockedBy and
// CheckMulticastAllowed are the pure selection logic: the multicast backend
// calls CheckMulticastAllowed before it creates anything, even when asked
// for explicitly. Data crosses this package as raw bf16 bits ([]uint16), so
// it does not depend on the kernel package's types.
//
// The GPU backends (unicast.go, multicast.go) set up CUDA VMM memory through
// a small consumer-side driver interface (VMM, MulticastVMM) and hand the
// kernels device pointers: NewUnicast maps every rank's cuMemCreate'd
// mailbox into every rank (Peers, Local), NewMulticast binds every rank's
// memory to one NVLink multicast object (MulticastPtr, Local). Both agree on
// FABRIC or POSIX FD handles, turn any rank's setup failure into an error on
// every rank, and release everything on Close and on every error path;
// Resolve picks the backend for --mailbox auto|multicast|unicast|host.
//
// # What this package must not do
//
// It does not compute (the kernel package does), does not talk to the hub
// itself (it is handed an Exchanger), never creates the multicast backend
// when MulticastBlockedBy reports a blocking variable, and never panics or
// exits on bad input from a peer: a peer's malformed or mismatching
// description becomes an error that names the peer's rank.
package mailbox
