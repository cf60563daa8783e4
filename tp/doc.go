// Package tp is what a tensor-parallel rank process imports to run
// tprun's fused up-projection: every rank multiplies the same small bf16
// activation block by its rows of the weight, adds its columns of a
// residual, and gets back the whole [M, hidden] block, every rank's
// columns. In a rank program:
//
//	g, err := tp.Join(ctx) // the job, from the environment: tprun --tp N, torchrun, srun, mpirun
//	defer g.Close()
//	up, err := g.NewUpProjection(ctx, hidden, latent, maxM) // a collective: the same on every rank
//	defer up.Close()
//	err = up.SetWeight(ctx, w) // this rank's [hidden/Size(), latent] rows, row-major, once
//	in := tp.UpInputs{M: m, Latent: l, Shared: s[g.Rank()*shard:], SharedStride: hidden}
//	err = up.Step(ctx, in, out) // out[:m*hidden] holds the whole block
//
// On a GPU, StepDevice takes device pointers (a tensor's data_ptr() is one)
// and waits; Enqueue queues the step on the caller's CUDA stream and
// returns, so that it can sit between the caller's own kernels and in the
// caller's CUDA graphs (a graph holding one step replays any number of
// times); Synchronize and Err report what became of queued steps. The op
// binds the device's primary context itself and leaves the caller's
// current context as it was. DeviceAlloc, CopyToDevice, CopyFromDevice
// and DeviceFree serve callers without a framework. examples/go/rank is a
// whole rank program.
//
// The kernels read the weight only in their packed layout. SetWeight and
// SetWeightDevice take it row-major and pack it once; a row-major weight
// passed with Step (UpInputs.Weight) is packed on the host at every step.
// A weight passed with a device step (StepDevice, Enqueue, Capture) must
// already be packed (PackWeight, DeviceInputs.WeightPacked): there is no
// packing kernel, so a row-major one is refused with ErrArgument before
// anything is sent.
//
// # The operation
//
// For every row m < M and column n of this rank's shard (package kernel
// writes it out):
//
//	S        = sum_k f32(latent[m,k]) * f32(weight[n,k])   (fp32 accumulation)
//	out[m,n] = bf16( f32(bf16(S)) + f32(shared[m,n]) )     (round to nearest even)
//
// The negative-zero rule: the op never stores a bf16 negative zero; a
// result that rounds to -0 is stored as +0, so that a written 32-bit word
// can never equal the mailbox's "not yet written" word (two -0). Inputs
// may hold -0. A result compared bit for bit against another
// implementation must map -0 to +0 first.
//
// # Shapes
//
// The rules (Shape.Validate checks them, NewUpProjection and every step
// apply them, and a violation is a *ShapeError naming the value and the
// rule, matching ErrShape, with nothing sent):
//
//   - M, the rows of a step, is in 1..MaxM (128) and at most the maxM the
//     op was made with; every rank passes the same M for the same step.
//     Every backend computes every M: on the GPU, M up to 8 runs the
//     skinny kernels and a larger M a tensor-core kernel followed by the
//     receive kernel;
//   - the group has 1..MaxTP (16) ranks and hidden_dim is divisible by it;
//     shard_dim = hidden_dim / size is a multiple of ShardAlign (8);
//   - latent_dim is a multiple of LatentAlign (8), at most MaxLatent;
//   - device operands are 16-byte aligned, SharedStride is a multiple of 8
//     and at least shard_dim, and the output block overlaps no operand.
//
// # Errors
//
// A caller matches these with errors.Is (and errors.As for the types):
//
//   - ErrShape (*ShapeError): a bad shape, buffer length or device address;
//   - ErrNoWeight: a step left its weight out before SetWeight;
//   - ErrArgument: a bad argument other than a shape, such as a row-major
//     device weight passed with a step (pack it, or give it once with
//     SetWeightDevice), nothing sent;
//   - ErrTimeout (*TimeoutError): a peer's slice did not arrive within the
//     deadline (WithDeadline); Missing names the ranks, OtherM those that
//     ran the step with another M;
//   - ErrAborted (*RankError, naming the rank): the job failed: a peer
//     died, left or aborted, or a stall ended it; ErrRendezvous when not
//     every rank joined;
//   - ErrBroken: a step after a failed one (the op is unusable: close it);
//   - ErrClosed: a call after Close;
//   - ErrBusy: a call of the op while another call of it runs;
//   - ErrBackendUnavailable: device operands on the host backend, or a
//     backend asked for by name that cannot run here; ErrMulticastDisabled
//     names the variable that forbids multicast;
//   - ErrConfig: a bad option, or ranks that disagree about the op;
//     ErrStepMismatch: ranks about to run different steps (WithStepChecks);
//   - ErrEnv (*EnvError, naming the variable): Join found no launch
//     environment, or a missing or malformed variable in it;
//   - ErrCollectiveTimeout (*CollectiveTimeoutError): a live rank never
//     joined a group collective within the collective timeout;
//   - ErrNoDriver, ErrNoGPU: a GPU asked for where the CUDA driver does not
//     load or sees no device.
//
// # Backends
//
// The op runs on one of two engines: the host engine (the CPU kernel and a
// shared-memory mailbox) or, where every rank has a usable GPU, the CUDA
// engine: the skinny kernel stores the rank's slice into every other
// rank's mailbox and its own output (the unicast VMM backend), or into
// every rank's mailbox through the multicast one where the group resolves
// to it, and the Lamport receive collects the rest of the block: receive
// CTAs appended to the skinny kernel's grid when the rank has its GPU to
// itself, else (and after the tensor-core kernel of M above 8, always) a
// receive kernel chained with programmatic dependent launch. The mailbox
// slot of each step is chosen on the device, from a counter the step's
// kernels advance. The mailbox choice is collective:
// every rank probes its device and its multicast safety variables, and all
// ranks apply the same verdict (WithBackend, ResolveMailbox).
//
// Join reads the environment. Under the tprun launcher (TPRUN_HUB set) it
// connects to the launcher's hub. Ranks started by srun, mpirun or
// torchrun join without the launcher: rank 0 opens the hub at a socket
// path derived from the job id found in the environment, and the others
// connect to it. A job whose ranks span nodes meets over TCP instead, with
// a job secret (see Join), and shares GPU memory through fabric handles.
//
// Nothing waits forever: a group collective that a live rank never joins
// fails on every rank after the collective timeout (default 5 min,
// TPRUN_COLLECTIVE_TIMEOUT, WithCollectiveTimeout), naming the ranks that
// did not come (*CollectiveTimeoutError).
//
// What this package must not do: import the launcher, start or signal
// processes, exit the process, or read the real environment for joining
// when a test passes WithEnv. (The multicast safety variables are always
// read from the real environment: for that rule the safe reading is the
// one that can only forbid.) It never hides which variable was missing or
// wrong.
package tp
