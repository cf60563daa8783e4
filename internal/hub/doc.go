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
// (frame.go). On the Unix socket the server checks each peer's uid
// (SO_PEERCRED) and the job token in its hello. Ranks on several nodes
// reach a TCP hub instead (ServerConfig.TCPAddr, DialTCP): there each side
// proves it knows the job secret (HMAC-SHA256 over fresh nonces) before
// the hello, a frame is limited to MaxHandshakeFrame until then, and both
// sides ping, so that a node that goes silent ends the job (*NodeError)
// instead of leaving it waiting; descriptors do not travel over TCP
// (ErrCrossNode). The secret authenticates, it does not encrypt: the
// frames (small blobs such as fabric handles) cross the cluster network in
// the clear. Anything refused is logged with its reason, and any
// malformed input becomes an error for that connection or job, never a
// panic. When a rank dies, leaves early or is aborted, every call of every
// other rank fails promptly with a *RankError naming it (and its host,
// across nodes); a collective that live ranks never join fails after the
// waiting ranks' collective timeout with a *CollectiveTimeoutError naming
// them.
//
// What this package must not do: carry bulk data (frames are limited to
// MaxFrame, the data path is the mailbox), listen on TCP without a job
// secret, or know about GPUs, processes or the launcher. It never exits
// the process and never panics on input from a connection.
package hub
