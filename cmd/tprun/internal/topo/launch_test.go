package topo

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestPreflightNotice(t *testing.T) {
	tests := []struct {
		desc    string
		node    func(t *testing.T) *fakeNode
		opts    Options
		needGPU string
		notice  string // prefix
		err     error  // errors.Is target; nil means success
		errHas  string
	}{
		{"usable: the summary", func(t *testing.T) *fakeNode { return hgxNode(t, 8) }, Options{TP: 8}, "",
			"topology: 8 × NVIDIA H200 (cc 9.0); mailbox multicast", nil, ""},
		{"no driver: continue on the CPU", func(t *testing.T) *fakeNode { return &fakeNode{initRet: nvml.ERROR_LIBRARY_NOT_FOUND} },
			Options{TP: 2}, "", "no NVIDIA driver found (libnvidia-ml.so.1 not loadable); continuing on the CPU", nil, ""},
		{"no driver, GPU required: error", func(t *testing.T) *fakeNode { return &fakeNode{initRet: nvml.ERROR_LIBRARY_NOT_FOUND} },
			Options{TP: 2}, "--mailbox unicast", "", ErrNoDriver, "no NVIDIA driver found (libnvidia-ml.so.1 not loadable), and --mailbox unicast needs a GPU"},
		{"refused: error with a hint", func(t *testing.T) *fakeNode { return pcieNode(t, 4, false) }, Options{TP: 4}, "",
			"", ErrRefused, "GPU 0 ↔ GPU 2: no P2P read"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			lib, _ := tc.node(t).lib()
			tc.opts.LookupEnv = env()
			notice, err := PreflightNotice(context.Background(), lib, tc.opts, tc.needGPU, "continuing on the CPU")
			if tc.err == nil && err != nil || tc.err != nil && !errors.Is(err, tc.err) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if err != nil && (!strings.Contains(err.Error(), tc.errHas) || notice != "") {
				t.Errorf("err %q lacks %q, or notice %q not empty", err, tc.errHas, notice)
			}
			if !strings.HasPrefix(notice, tc.notice) || strings.Contains(notice, "\n") {
				t.Errorf("notice %q, want one line starting %q", notice, tc.notice)
			}
		})
	}
}

func TestEnvLookup(t *testing.T) {
	look := EnvLookup([]string{"A=1", "B=", "A=2", "C=x=y", "junk"})
	for _, tc := range []struct {
		k, v string
		ok   bool
	}{{"A", "2", true}, {"B", "", true}, {"C", "x=y", true}, {"junk", "", false}, {"D", "", false}} {
		if v, ok := look(tc.k); v != tc.v || ok != tc.ok {
			t.Errorf("%s: got %q %v, want %q %v", tc.k, v, ok, tc.v, tc.ok)
		}
	}
}
