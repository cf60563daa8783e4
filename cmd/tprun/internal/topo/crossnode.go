package topo

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultIMEXDir is where the driver's IMEX channel device files live
// (channel0, channel1, ...): one must exist, and be open to the job's
// user, for CUDA to export or import fabric handles.
const DefaultIMEXDir = "/dev/nvidia-caps-imex-channels"

// CrossNode says whether the checked GPUs can take part in a job across
// nodes, which shares GPU memory only through CUDA fabric handles: the
// fabric cliques of the devices and the IMEX channels of this node. It is
// read, not tried: the export itself happens when the mailbox is set up,
// and its refusal there names the same causes.
type CrossNode struct {
	// Cliques are the distinct "cluster/clique" of the devices on a
	// completed NVLink fabric ("" cluster when NVML gave none).
	Cliques []string `json:"cliques"`
	// IMEXDir is where channels were looked for; IMEXChannels the channel
	// files found there that this user may open for reading and writing.
	IMEXDir      string   `json:"imex_dir"`
	IMEXChannels []string `json:"imex_channels"`
	// FabricHandles: every device is on a completed fabric, all in one
	// clique, and an IMEX channel is open to this user, so exporting a
	// fabric handle should work.
	FabricHandles bool `json:"fabric_handles"`
	// Reasons say why not, one each; empty when FabricHandles.
	Reasons []string `json:"reasons"`
}

// imexSetup is what the administrator does where no channel exists.
const imexSetup = "the administrator creates " + DefaultIMEXDir + "/channel0 on every node " +
	"(mknod with the major number of nvidia-caps-imex-channels in /proc/devices, minor 0) and runs the nvidia-imex service across the NVLink domain"

// readIMEX lists the channel files in dir that this user may open for
// reading and writing, or says why there are none.
func readIMEX(dir string) (usable []string, why string) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Sprintf("no IMEX channel: %s does not exist; %s", dir, imexSetup)
	}
	if err != nil {
		return nil, fmt.Sprintf("no IMEX channel readable: %v", err)
	}
	var found []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "channel") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		found = append(found, e.Name())
		if unix.Access(p, unix.R_OK|unix.W_OK) == nil {
			usable = append(usable, p)
		}
	}
	switch {
	case len(usable) > 0:
		return usable, ""
	case len(found) == 0:
		return nil, fmt.Sprintf("no IMEX channel: %s holds none; %s", dir, imexSetup)
	}
	return nil, fmt.Sprintf("no IMEX channel open to this user: %s holds %s, none readable and writable by uid %d; the administrator grants access to one",
		dir, strings.Join(found, ", "), os.Getuid())
}

// judgeCrossNode reads the IMEX channels in dir and judges fabric handles
// for devs.
func judgeCrossNode(devs []Device, dir string) CrossNode {
	c := CrossNode{IMEXDir: dir, Cliques: []string{}, IMEXChannels: []string{}, Reasons: []string{}}
	for _, d := range devs {
		label := gpuLabel(d.CUDAOrdinal, d.NVMLIndex)
		if !d.fabricCompleted {
			c.Reasons = append(c.Reasons, fmt.Sprintf("%s is on no completed NVLink fabric (fabric %s): fabric handles need the GPUs of one multi-node NVLink domain", label, fabricWords(d.Fabric)))
			continue
		}
		k := fmt.Sprintf("%s/%d", d.Fabric.ClusterUUID, d.Fabric.Clique)
		if !slices.Contains(c.Cliques, k) {
			c.Cliques = append(c.Cliques, k)
		}
	}
	if len(c.Cliques) > 1 {
		c.Reasons = append(c.Reasons, fmt.Sprintf("the GPUs are in %d fabric cliques (%s): NVLink reaches only within one", len(c.Cliques), strings.Join(c.Cliques, ", ")))
	}
	usable, why := readIMEX(dir)
	if usable != nil {
		c.IMEXChannels = usable
	} else {
		c.Reasons = append(c.Reasons, why)
	}
	c.FabricHandles = len(devs) > 0 && len(c.Reasons) == 0
	if len(devs) == 0 {
		c.Reasons = append(c.Reasons, "no GPU checked")
	}
	return c
}

// write writes the section of the text report.
func (c CrossNode) write(b *strings.Builder) {
	if c.FabricHandles {
		fmt.Fprintf(b, "\nAcross nodes: fabric handles should export (fabric clique %s, IMEX channel %s)\n",
			strings.Join(c.Cliques, ", "), strings.Join(c.IMEXChannels, ", "))
		return
	}
	b.WriteString("\nAcross nodes: no fabric handles, so no job across nodes from here:\n")
	for _, r := range c.Reasons {
		b.WriteString("  - " + r + "\n")
	}
}
