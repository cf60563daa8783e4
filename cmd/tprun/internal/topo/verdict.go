package topo

import (
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tprun/tprun/mailbox"
)

// judge fills r.Verdict from the facts collect gathered. It is pure: no
// NVML, the environment only through lookup.
func judge(r *Report, opts Options, lookup func(string) (string, bool)) {
	v := &r.Verdict
	v.Requested = opts.Mailbox
	if v.Requested == "" {
		v.Requested = BackendAuto
	}
	problems := append([]string{}, v.Problems...)

	problems = append(problems, deviceProblems(r)...)

	var denied []string
	for _, p := range r.Pairs {
		la, lb := pairLabels(r, p)
		for _, c := range []struct {
			what string
			s    P2P
		}{{"read", p.Read}, {"write", p.Write}} {
			if c.s.denied {
				denied = append(denied, fmt.Sprintf("%s ↔ %s: no P2P %s (%s)", la, lb, c.what, c.s.Status))
			}
		}
		if !p.Read.denied && !p.Write.denied && (!p.Read.OK || !p.Write.OK) {
			r.Warnings = append(r.Warnings, fmt.Sprintf("%s ↔ %s: P2P read/write not confirmed by NVML (read: %s; write: %s); "+
				"unicast finds out when it maps peer memory", la, lb, p.Read.Status, p.Write.Status))
		}
	}

	// The mailbox owns the safety rule (and enforces it again when it
	// creates the backend); asking it keeps the two from drifting apart.
	getenv := func(k string) string { s, _ := lookup(k); return s }
	if name, blocked := mailbox.MulticastBlockedBy(getenv); blocked {
		v.SafetyVariable = name + "=" + strings.TrimSpace(getenv(name))
	}
	v.MulticastBlockers = multicastBlockers(r, v.SafetyVariable)

	if opts.Strict {
		for _, w := range r.Warnings {
			problems = append(problems, "warning (strict): "+w)
		}
	}

	n := len(r.Devices)
	switch v.Requested {
	case BackendAuto:
		switch {
		case len(problems) > 0:
		case len(denied) > 0:
			problems = append(problems, denied...)
		case len(v.MulticastBlockers) == 0:
			v.Backend = BackendMulticast
			v.Reason = fmt.Sprintf("multicast: all %d GPUs are on a completed NVSwitch fabric (clique %d), "+
				"each runs one rank, and no multicast safety variable is set", n, r.Devices[0].Fabric.Clique)
		default:
			v.Backend = BackendUnicast
			v.Reason = unicastReason(n) + "; multicast is off because " + firstAndCount(v.MulticastBlockers)
		}
	case BackendMulticast:
		switch {
		case len(problems) > 0:
		case v.SafetyVariable != "":
			problems = append(problems, fmt.Sprintf("--mailbox multicast was asked for but %s is set: the multicast safety rule forbids creating it "+
				"(unset the variable, or use --mailbox auto or unicast)", v.SafetyVariable))
		case len(v.MulticastBlockers) > 0:
			for _, b := range v.MulticastBlockers {
				problems = append(problems, "--mailbox multicast was asked for but "+b)
			}
		case len(denied) > 0:
			problems = append(problems, denied...)
		default:
			v.Backend = BackendMulticast
			v.Reason = fmt.Sprintf("multicast (asked for): all %d GPUs are on a completed NVSwitch fabric (clique %d)", n, r.Devices[0].Fabric.Clique)
		}
	case BackendUnicast:
		switch {
		case len(problems) > 0:
		case len(denied) > 0:
			problems = append(problems, denied...)
		default:
			v.Backend = BackendUnicast
			v.Reason = unicastReason(n) + " (unicast asked for)"
		}
	default:
		problems = append(problems, fmt.Sprintf("--mailbox %q: want auto, multicast or unicast", v.Requested))
	}

	v.Problems = problems
	v.OK = len(problems) == 0 && v.Backend != ""
	if !v.OK {
		v.Backend = ""
		v.Reason = "refused: " + firstAndCount(problems)
	}
}

// deviceProblems lists what makes the devices unusable whatever the
// backend.
func deviceProblems(r *Report) []string {
	var out []string
	for i := 1; i < len(r.Devices); i++ {
		a, b := r.Devices[0], r.Devices[i]
		if a.Name != "" && b.Name != "" && a.Name != b.Name {
			out = append(out, fmt.Sprintf("mixed models: %s is %s but %s is %s; every rank must run on the same model",
				devLabel(a), a.Name, devLabel(b), b.Name))
			break
		}
	}
	for _, d := range r.Devices {
		l := devLabel(d)
		if d.migEnabled {
			out = append(out, fmt.Sprintf("%s: MIG is enabled; tprun needs whole GPUs (MIG instances have no P2P or multicast); "+
				"disable it with nvidia-smi -i %d -mig 0", l, d.NVMLIndex))
		}
		if d.migPending {
			r.Warnings = append(r.Warnings, l+": MIG will be enabled at the next GPU reset")
		}
		switch nvml.ComputeMode(d.computeMode) {
		case nvml.COMPUTEMODE_PROHIBITED:
			out = append(out, fmt.Sprintf("%s: compute mode is prohibited, so no process may create a CUDA context on it", l))
		case nvml.COMPUTEMODE_EXCLUSIVE_PROCESS, nvml.COMPUTEMODE_EXCLUSIVE_THREAD:
			// One context per GPU is allowed. Each rank is its own process
			// and reaches peers through imported memory handles, never
			// through a context on the peer's GPU, so one rank per GPU
			// works; a second rank on the same GPU would be turned away.
			if d.Ranks > 1 {
				out = append(out, fmt.Sprintf("%s: compute mode is %s, which allows one CUDA context, but %d ranks would use it",
					l, d.ComputeMode, d.Ranks))
			}
		}
	}
	return out
}

// multicastBlockers lists why multicast cannot be used, in the order a
// person would fix them.
func multicastBlockers(r *Report, safetyVar string) []string {
	out := []string{}
	if safetyVar != "" {
		out = append(out, safetyVar+" is set (multicast safety rule)")
	}
	switch len(r.Devices) {
	case 0:
		return append(out, "there is no GPU")
	case 1:
		return append(out, "there is only one GPU, with no peer to reach")
	}
	var perDev []string
	for _, d := range r.Devices {
		l := devLabel(d)
		switch {
		case d.Ranks > 1:
			perDev = append(perDev, fmt.Sprintf("%s runs %d ranks and a multicast object takes each GPU once", l, d.Ranks))
		case d.Fabric.State == "not reported" || d.Fabric.State == "not supported":
			perDev = append(perDev, l+" is not on an NVSwitch fabric (fabric state "+d.Fabric.State+")")
		case d.Fabric.State != "completed":
			perDev = append(perDev, l+": NVSwitch fabric state is "+d.Fabric.State+", not completed")
		case !d.fabricCompleted:
			perDev = append(perDev, l+": NVSwitch fabric registration completed with "+d.Fabric.Status)
		case d.ccMajor < 0:
			perDev = append(perDev, l+": compute capability not reported (multicast needs 9.0 or newer)")
		case d.ccMajor < 9:
			perDev = append(perDev, fmt.Sprintf("%s has compute capability %s; NVLink multicast needs 9.0 or newer", l, d.ComputeCapability))
		case d.NVLink.Status == "reported" && d.NVLink.ToNVSwitch == 0 && knowsRemotes(d.NVLink):
			perDev = append(perDev, l+": no active NVLink reaches an NVSwitch")
		}
	}
	out = append(out, perDev...)
	if len(perDev) == 0 {
		a := r.Devices[0]
		for _, b := range r.Devices[1:] {
			if a.Fabric.Clique != b.Fabric.Clique || a.Fabric.ClusterUUID != b.Fabric.ClusterUUID {
				out = append(out, fmt.Sprintf("%s and %s are in different NVSwitch fabric cliques (%s clique %d, %s clique %d)",
					devLabel(a), devLabel(b), a.Fabric.ClusterUUID, a.Fabric.Clique, b.Fabric.ClusterUUID, b.Fabric.Clique))
				break
			}
		}
	}
	return out
}

func knowsRemotes(nl NVLink) bool {
	for _, l := range nl.Links {
		if l.Active && l.Remote != "unknown" {
			return true
		}
	}
	return false
}

func unicastReason(n int) string {
	if n == 1 {
		return "unicast: one GPU, with no peer to write to"
	}
	return fmt.Sprintf("unicast: P2P read and write work between every pair of the %d GPUs", n)
}

func firstAndCount(list []string) string {
	if len(list) == 1 {
		return list[0]
	}
	return fmt.Sprintf("%s (and %d more)", list[0], len(list)-1)
}

func devLabel(d Device) string { return gpuLabel(d.CUDAOrdinal, d.NVMLIndex) }

func pairLabels(r *Report, p Pair) (string, string) {
	la, lb := fmt.Sprintf("GPU %d", p.A), fmt.Sprintf("GPU %d", p.B)
	for _, d := range r.Devices {
		switch d.CUDAOrdinal {
		case p.A:
			la = devLabel(d)
		case p.B:
			lb = devLabel(d)
		}
	}
	return la, lb
}
