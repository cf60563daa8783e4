// Package tp is what a tensor-parallel rank process imports: Join finds
// the other ranks of the job and returns a Group with the small
// collectives the mailbox needs (barrier, all-gather and broadcast of
// bytes and of file descriptors); the fused up-projection op builds on it.
//
// Join reads the environment. Under the tprun launcher (TPRUN_HUB set) it
// connects to the launcher's hub. Ranks started by srun, mpirun or torchrun
// join without the launcher: rank 0 opens the hub at a socket path derived
// from the job id found in the environment, and the others connect to it.
// That hub is node-local, so such a job must run on one node.
//
// The fused op is UpProjection (upproj.go): Step takes the rank's operands
// and returns the whole [M, hidden] block. It runs on one of two engines:
// the host engine (the CPU kernel and the shared-memory mailbox) or, where
// a GPU is usable, the CUDA engine (upproj_cuda.go, cuda.go): the skinny
// kernel stores the rank's slice into every other rank's mailbox and its
// own output (the unicast VMM backend), or into every rank's mailbox
// through the multicast one where the group resolves to it, and the
// Lamport receive collects the rest of the block: receive CTAs appended to the skinny
// kernel's grid when the rank has its GPU to itself, else a receive kernel
// chained with programmatic dependent launch. The mailbox choice is collective: every rank probes
// its device and its multicast safety variables, and all ranks apply the
// same verdict. StepDevice takes operands already on the device, and
// Capture records a sequence of steps into a CUDA graph that every rank
// replays in lockstep.
//
// What this package must not do: import the launcher, start or signal
// processes, exit the process, or read the real environment for joining
// when a test passes WithEnv. (The multicast safety variables are always
// read from the real environment: for that rule the safe reading is the
// one that can only forbid.) It never hides which variable was missing or wrong.
package tp
