// Package topo checks, through NVML, whether the GPUs a tprun job will use
// can run it, and which mailbox backend `--mailbox auto` picks and why.
//
// Preflight initializes the NVML library it is given (the real go-nvml
// library in production, go-nvml's mock in tests), reads every device the
// job will use (identity, compute capability, MIG and compute mode, NVLink
// link states and versions, GPU fabric state and clique), every pair of them
// (P2P read, write and NVLink status in both directions, PCIe common
// ancestor, NVLink count), shuts NVML down again, and then judges the facts
// with pure code:
//
//   - multicast when every device is on a completed NVSwitch fabric in one
//     clique, is a Hopper or newer chip (multicast objects need compute
//     capability 9.0; CUDA's CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, checked
//     by the mailbox when it creates the object, is the final word), holds
//     exactly one rank, and no safety variable forbids multicast (the rule
//     is mailbox.MulticastBlockedBy, the same the mailbox enforces);
//   - unicast when P2P read and write work between every pair;
//   - otherwise the job is refused, naming the offending pair and why.
//
// Mixed models, MIG, a prohibited compute mode and an exclusive compute mode
// with more than one rank on a device are errors. A degraded NVLink, or a
// query NVML answers with NOT_SUPPORTED (or another non-fatal code) where an
// answer was expected, is a warning; Options.Strict turns warnings into
// errors. Absences that are normal for the hardware are not warnings: MIG on
// a GPU without MIG, NVLink on a PCIe-only GPU, fabric info on a GPU outside
// an NVSwitch fabric.
//
// Beside the verdict, the report says whether these GPUs can join a job
// across nodes (CrossNode): that needs CUDA fabric handles, which need
// every device on one completed NVLink fabric clique and an IMEX channel
// this user may open (read from NVML and the channel directory, not tried:
// the mailbox's own export is the final word).
//
// Devices are named by CUDA ordinal, because that is what ranks use
// (TPRUN_DEVICES, or the local rank). MapCUDAOrdinals reproduces CUDA's
// enumeration from the NVML devices' PCI bus ids, honouring
// CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER; see its documentation for the
// assumption made under the default FASTEST_FIRST order.
//
// Main is `tprun topo`: a matrix in the spirit of `nvidia-smi topo -m`, one
// line per device, and the verdict in words, or the same report as JSON.
//
// What this package must not do: call NVML before Init succeeded or after
// Shutdown; create CUDA contexts or touch any GPU state (it only reads);
// call os.Exit or read the environment except through Options.LookupEnv;
// decide for the caller what to do without a driver (it returns
// ErrNoDriver; the launcher falls back to the CPU, `tprun topo` exits 3).
package topo
