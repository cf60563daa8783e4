package topo

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestCrossNode: the fabric clique and the IMEX channels decide whether
// fabric handles can be exported, and the report says why not in words
// an administrator can act on.
func TestCrossNode(t *testing.T) {
	channels := func(t *testing.T, names ...string) string {
		dir := t.TempDir()
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	for _, tc := range []struct {
		desc    string
		node    func(t *testing.T) *fakeNode
		dir     func(t *testing.T) string
		ok      bool
		reasons []string // substrings, one reason each
		text    string   // in the text report
	}{
		{desc: "NVL domain with a channel", node: func(t *testing.T) *fakeNode { return hgxNode(t, 4) },
			dir: func(t *testing.T) string { return channels(t, "channel0") }, ok: true, text: "Across nodes: fabric handles should export (fabric clique "},
		{desc: "NVL domain without the channel directory", node: func(t *testing.T) *fakeNode { return hgxNode(t, 4) },
			dir:     func(t *testing.T) string { return filepath.Join(t.TempDir(), "none") },
			reasons: []string{"does not exist; the administrator creates /dev/nvidia-caps-imex-channels/channel0 on every node"},
			text:    "Across nodes: no fabric handles, so no job across nodes from here:"},
		{desc: "channel directory without channels", node: func(t *testing.T) *fakeNode { return hgxNode(t, 2) },
			dir: func(t *testing.T) string { return channels(t, "README") }, reasons: []string{"holds none"}},
		{desc: "PCIe GPUs with a channel", node: func(t *testing.T) *fakeNode { return pcieNode(t, 2, true) },
			dir:     func(t *testing.T) string { return channels(t, "channel0") },
			reasons: []string{"is on no completed NVLink fabric (fabric not reported)", "is on no completed NVLink fabric"}},
		{desc: "two cliques", node: func(t *testing.T) *fakeNode {
			n := hgxNode(t, 2)
			n.gpus[1].fabric.CliqueId = n.gpus[0].fabric.CliqueId + 1
			return n
		}, dir: func(t *testing.T) string { return channels(t, "channel0") }, reasons: []string{"the GPUs are in 2 fabric cliques"}},
		{desc: "fabric still coming up", node: func(t *testing.T) *fakeNode {
			n := hgxNode(t, 2)
			n.gpus[0].fabric.State = nvml.GPU_FABRIC_STATE_IN_PROGRESS
			return n
		}, dir: func(t *testing.T) string { return channels(t, "channel0") }, reasons: []string{"(fabric in progress)"}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			lib, _ := tc.node(t).lib()
			r, _ := Preflight(context.Background(), lib, Options{LookupEnv: env(), IMEXDir: tc.dir(t)})
			if r == nil {
				t.Fatal("no report")
			}
			c := r.CrossNode
			if c.FabricHandles != tc.ok || len(c.Reasons) != len(tc.reasons) {
				t.Fatalf("fabric handles %v, reasons %q", c.FabricHandles, c.Reasons)
			}
			for i, want := range tc.reasons {
				if !strings.Contains(c.Reasons[i], want) {
					t.Errorf("reason %d %q does not say %q", i, c.Reasons[i], want)
				}
			}
			if tc.ok && (len(c.Cliques) != 1 || len(c.IMEXChannels) != 1 || !strings.HasSuffix(c.IMEXChannels[0], "channel0")) {
				t.Errorf("cliques %v, channels %v", c.Cliques, c.IMEXChannels)
			}
			var text bytes.Buffer
			if err := r.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			if tc.text != "" && !strings.Contains(text.String(), tc.text) {
				t.Errorf("text report lacks %q:\n%s", tc.text, text.String())
			}
			for _, reason := range c.Reasons {
				if !strings.Contains(text.String(), reason) {
					t.Errorf("text report lacks the reason %q", reason)
				}
			}
		})
	}
	t.Run("a channel this user may not open", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root may open any file")
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "channel0"), nil, 0o000); err != nil {
			t.Fatal(err)
		}
		usable, why := readIMEX(dir)
		if usable != nil || !strings.Contains(why, "none readable and writable by uid") {
			t.Errorf("got %v, %q", usable, why)
		}
	})
}
