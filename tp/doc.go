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
// What this package must not do: import the launcher, start or signal
// processes, exit the process, or read the real environment when a test
// passes WithEnv. It never hides which variable was missing or wrong.
package tp
