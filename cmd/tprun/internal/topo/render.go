package topo

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Summary is the report in one line, for the launcher to print before it
// starts the ranks.
func (r *Report) Summary() string {
	var b strings.Builder
	b.WriteString("topology: ")
	b.WriteString(r.hardware())
	if r.Verdict.OK {
		b.WriteString("; mailbox ")
	} else {
		b.WriteString("; ")
	}
	b.WriteString(r.Verdict.Reason)
	if n := len(r.Warnings); n > 0 {
		fmt.Fprintf(&b, "; %d warning%s (tprun topo shows them)", n, plural(n, "", "s"))
	}
	return b.String()
}

// hardware says what GPUs the job uses, e.g. "8 × NVIDIA H200 (cc 9.0)".
func (r *Report) hardware() string {
	switch {
	case len(r.Devices) == 0:
		return "no GPU"
	case !sameModel(r.Devices):
		return fmt.Sprintf("%d GPUs of mixed models", len(r.Devices))
	}
	d := r.Devices[0]
	s := fmt.Sprintf("%d × %s", len(r.Devices), orUnknown(d.Name, "unknown model"))
	if d.ComputeCapability != "" {
		s += " (cc " + d.ComputeCapability + ")"
	}
	return s
}

func sameModel(devs []Device) bool {
	for _, d := range devs {
		if d.Name != devs[0].Name {
			return false
		}
	}
	return true
}

// WriteJSON writes the report as an indented JSON document (schema
// Schema) followed by a newline.
func (r *Report) WriteJSON(w io.Writer) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("topo: encoding report: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteText writes the report for people: the matrix in the spirit of
// `nvidia-smi topo -m`, a legend, one block per device, the pairs that are
// not fine, the warnings and the verdict.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "tprun topo: %s", r.hardware())
	if r.DriverVersion != "" {
		fmt.Fprintf(&b, ", driver %s", r.DriverVersion)
	}
	if r.CUDADriverVersion != "" {
		fmt.Fprintf(&b, ", CUDA %s", r.CUDADriverVersion)
	}
	fmt.Fprintf(&b, "; NVML sees %d GPU%s, CUDA %d\n", r.NVMLDevices, plural(r.NVMLDevices, "", "s"), len(r.CUDA.NVMLIndex))
	if r.TP > 0 {
		fmt.Fprintf(&b, "tp %d: rank → GPU %s\n", r.TP, joinInts(r.Ranks))
	}

	if len(r.Devices) > 0 {
		b.WriteString("\n")
		r.writeMatrix(&b)
		b.WriteString("\n" + legend)
	}

	b.WriteString("\nCUDA numbering: " + r.cudaWords() + "\n")

	if len(r.Devices) > 0 {
		b.WriteString("\nDevices:\n")
		for _, d := range r.Devices {
			writeDevice(&b, d)
		}
	}

	if len(r.Pairs) > 0 {
		b.WriteString("\nPairs:\n")
		fine := 0
		for _, p := range r.Pairs {
			if p.Read.OK && p.Write.OK {
				fine++
				continue
			}
			la, lb := pairLabels(r, p)
			fmt.Fprintf(&b, "  %s ↔ %s, through %s:\n      P2P read:  %s\n      P2P write: %s\n", la, lb, p.Path, p.Read.Status, p.Write.Status)
		}
		switch {
		case fine == 1 && len(r.Pairs) == 1:
			b.WriteString("  the pair: P2P read and write ok\n")
		case fine == len(r.Pairs):
			fmt.Fprintf(&b, "  all %d pairs: P2P read and write ok\n", fine)
		case fine > 0:
			fmt.Fprintf(&b, "  the other %d pair%s: P2P read and write ok\n", fine, plural(fine, "", "s"))
		}
	}

	if len(r.Devices) > 0 {
		r.CrossNode.write(&b)
	}

	if len(r.Warnings) > 0 {
		b.WriteString("\nWarnings:\n")
		for _, w := range r.Warnings {
			b.WriteString("  - " + w + "\n")
		}
	}

	v := r.Verdict
	b.WriteString("\nVerdict: ")
	if v.OK {
		fmt.Fprintf(&b, "mailbox %s\n  %s\n", v.Backend, v.Reason)
	} else {
		b.WriteString("refused\n")
		for _, p := range v.Problems {
			b.WriteString("  - " + p + "\n")
		}
	}
	if v.OK && v.Backend != BackendMulticast && len(v.MulticastBlockers) > 1 {
		b.WriteString("  multicast is off because:\n")
		for _, m := range v.MulticastBlockers {
			b.WriteString("  - " + m + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

const legend = `Legend:
  X    = self
  NV#  = joined by # NVLinks, directly or through NVSwitches (NV: count not reported)
  PIX  = one PCIe switch                 PXB  = several PCIe switches
  PHB  = a PCIe host bridge              NODE = host bridges within one NUMA node
  SYS  = across NUMA nodes (CPU link)    BRD  = the same board
  ?    = not reported                    !    = NVML denies P2P read or write
`

func (r *Report) writeMatrix(b *strings.Builder) {
	cells := make([][]string, len(r.Devices))
	width := 4
	for i := range r.Devices {
		cells[i] = make([]string, len(r.Devices))
		cells[i][i] = "X"
	}
	idx := map[int]int{}
	for i, d := range r.Devices {
		idx[d.CUDAOrdinal] = i
	}
	for _, p := range r.Pairs {
		c := p.Cell
		if p.Read.denied || p.Write.denied {
			c += "!"
		}
		i, j := idx[p.A], idx[p.B]
		cells[i][j], cells[j][i] = c, c
		width = max(width, len(c))
	}
	names := make([]string, len(r.Devices))
	for i, d := range r.Devices {
		names[i] = fmt.Sprintf("GPU%d", d.CUDAOrdinal)
		width = max(width, len(names[i]))
	}
	col := width + 2
	line := func(head string, row []string) {
		var l strings.Builder
		fmt.Fprintf(&l, "%-*s", col, head)
		for _, c := range row {
			fmt.Fprintf(&l, "%-*s", col, c)
		}
		b.WriteString(strings.TrimRight(l.String(), " ") + "\n")
	}
	line("", names)
	for i, row := range cells {
		line(names[i], row)
	}
}

func writeDevice(b *strings.Builder, d Device) {
	fmt.Fprintf(b, "  GPU %d  nvidia-smi %d  %s  cc %s  %s  %s\n", d.CUDAOrdinal, d.NVMLIndex,
		orUnknown(d.Name, "model not reported"), orUnknown(d.ComputeCapability, "?"), d.PCIBusID, orUnknown(d.UUID, "uuid not reported"))
	fmt.Fprintf(b, "         MIG %s, compute mode %s", d.MIG, d.ComputeMode)
	if d.Ranks > 1 {
		fmt.Fprintf(b, ", %d ranks", d.Ranks)
	}
	b.WriteString(", NVLink " + nvlinkWords(d.NVLink) + ", fabric " + fabricWords(d.Fabric) + "\n")
}

func nvlinkWords(nl NVLink) string {
	if nl.Status != "reported" {
		return nl.Status
	}
	s := fmt.Sprintf("%d/%d active", nl.Active, nl.Active+nl.Inactive)
	var versions []string
	seen := map[string]bool{}
	for _, l := range nl.Links {
		if l.VersionName != "" && !seen[l.VersionName] {
			seen[l.VersionName] = true
			versions = append(versions, "v"+l.VersionName)
		}
	}
	var extra []string
	if len(versions) > 0 {
		extra = append(extra, strings.Join(versions, "/"))
	}
	if nl.ToNVSwitch > 0 {
		extra = append(extra, fmt.Sprintf("%d to NVSwitch", nl.ToNVSwitch))
	}
	if len(extra) > 0 {
		s += " (" + strings.Join(extra, ", ") + ")"
	}
	return s
}

func fabricWords(f Fabric) string {
	switch f.State {
	case "completed":
		s := fmt.Sprintf("completed, clique %d", f.Clique)
		if f.Status != "SUCCESS" {
			s += ", registration " + f.Status
		}
		return s
	}
	return f.State
}

func (r *Report) cudaWords() string {
	vis := "CUDA_VISIBLE_DEVICES unset"
	if r.CUDA.VisibleDevices != nil {
		vis = fmt.Sprintf("CUDA_VISIBLE_DEVICES=%q", *r.CUDA.VisibleDevices)
	}
	order := "CUDA_DEVICE_ORDER=" + r.CUDA.DeviceOrder
	switch r.CUDA.DeviceOrder {
	case "PCI_BUS_ID":
	case "", "FASTEST_FIRST":
		order = "CUDA_DEVICE_ORDER FASTEST_FIRST (PCI bus order assumed among equal GPUs)"
	}
	mapping := make([]string, len(r.CUDA.NVMLIndex))
	for ord, idx := range r.CUDA.NVMLIndex {
		mapping[ord] = fmt.Sprintf("%d→%d", ord, idx)
	}
	return fmt.Sprintf("%s, %s; CUDA ordinal → nvidia-smi index by PCI bus id: %s", vis, order, orUnknown(strings.Join(mapping, " "), "none"))
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

func orUnknown(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}
