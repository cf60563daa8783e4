// Package launcher starts and supervises the N rank processes of one
// tensor-parallel job on one node.
//
// It resolves and validates the command, opens the per-rank log files, hosts
// the rendezvous hub (internal/hub) in a private directory, gives every rank
// its environment (TPRUN_* and the torchrun names), prefixes every output
// line with the rank, and stops the whole job when the first rank fails, when
// tprun is signalled, when its stdout or stderr is closed (EPIPE), or when
// the job runs out of time: SIGTERM to each
// rank's process group (with SIGCONT, so that a stopped rank acts on it), a
// grace period, then SIGKILL. Run returns only after
// every rank it started has been reaped and the hub directory is gone, and
// writes a short report naming the first failing rank, how it ended and its
// last stderr lines, and the ranks with a suspended process (SIGSTOP, a
// debugger) in their process group when the job was stopped. A write that fails otherwise (a full disk, /dev/full, a
// log file) does not stop the job: tprun says so on stderr, writes nothing
// more to that destination, the report names it, and a job whose ranks all
// succeeded exits ExitOutputLost.
//
// Children are started from one OS thread that is locked for the lifetime of
// the job, each in its own process group and with a parent-death signal, so
// they die with tprun even when tprun itself is SIGKILLed (what they started
// themselves does not: only a stop signals their process groups).
//
// A rank's exit is acted on the moment its process is reaped, not when its
// stdout and stderr reach EOF: a background process it started may hold
// them open for as long as it runs. What the rank left running is named
// (pid, command line, which of its outputs it holds) and killed with its
// process group; a process that left the group is named and left alone.
// The output pumps go on until every rank was reaped, then get a short,
// bounded wait for EOF; a pipe still held then is read to its end, so
// that every line a rank wrote is out before the report.
//
// What this package must not do: call os.Exit or install signal handlers (the
// caller passes signals in through Config.Signals), touch
// CUDA_VISIBLE_DEVICES (every rank sees every GPU and picks its own), or be
// imported by a rank process (ranks import package tp).
package launcher
