// Package hub is tprun's rendezvous protocol: a Unix stream socket on which
// the ranks of one job find each other, and the few collective operations
// they need before (and beside) the GPU data path: barrier, all-gather and
// broadcast of small byte blobs, and all-gather and broadcast of file
// descriptors (SCM_RIGHTS).
//
// The Server is hosted by the launcher, or by rank 0 when something else
// (srun, mpirun, torchrun) started the ranks; every rank, rank 0 included,
// talks to it through a Client.
//
// The protocol is versioned, length-prefixed frames with a size limit
// (frame.go). The server checks each peer's uid (SO_PEERCRED) and the job
// token in its hello, refuses anything else with a logged reason, and turns
// any malformed input into an error for that connection or job, never a
// panic. When a rank dies, leaves early or is aborted, every call of every
// other rank fails promptly with a *RankError naming it.
//
// What this package must not do: carry bulk data (frames are limited to
// MaxFrame, the data path is the mailbox), talk to anything beyond the local
// node, or know about GPUs, processes or the launcher. It never exits the
// process and never panics on input from the socket.
package hub
