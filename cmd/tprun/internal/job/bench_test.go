package job

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/tprun/tprun/tp"
)

func TestBenchFlags(t *testing.T) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	bc := RegisterBenchFlags(fs)
	args := []string{"--hidden", "7168", "--latent", "3584", "--m", "1,2,3,4,5,6,7,8", "--replays", "50", "--warmup", "3",
		"--rotate-mb", "600", "--table", "/tmp/x.tsv", "--mailbox", "unicast"}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if bc.Replays != 50 || bc.Warmup != 3 || bc.RotateMB != 600 || bc.Table != "/tmp/x.tsv" ||
		bc.Job.Hidden != 7168 || len(bc.Job.M) != 8 || bc.Job.Mailbox != "unicast" {
		t.Errorf("parsed %+v, job %+v", bc, bc.Job)
	}
}

// TestBenchRefuses: bad settings and a machine without a GPU are refused
// before any collective, with one line.
func TestBenchRefuses(t *testing.T) {
	tests := []struct {
		desc string
		args []string
		want error
		text string
	}{
		{"no GPU", nil, tp.ErrBackendUnavailable, "--backend cuda"},
		{"cpu backend", []string{"--backend", "cpu"}, ErrFlag, "CUDA engine"},
		{"host mailbox", []string{"--mailbox", "host"}, ErrFlag, "GPU mailbox"},
		{"no replays", []string{"--replays", "0"}, ErrFlag, "replays"},
		{"negative warm-up", []string{"--warmup", "-1"}, ErrFlag, "warmup"},
		{"no rotation", []string{"--rotate-mb", "0"}, ErrFlag, "rotate-mb"},
		{"bad shape", []string{"--latent", "100"}, ErrFlag, "latent"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			fs := flag.NewFlagSet("bench", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			bc := RegisterBenchFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			err := bench(context.Background(), noGroup{size: 2}, bc, &out, nil)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %v, want one line matching %v and mentioning %q", err, tc.want, tc.text)
			}
			if out.Len() != 0 {
				t.Errorf("printed %q before refusing", out.String())
			}
		})
	}
}

func TestBenchRecordRoundTrip(t *testing.T) {
	r := benchRecord{median: 6900 * time.Nanosecond, p90: 7100 * time.Nanosecond, checked: 57344, wrong: 3, worst: 0.4,
		bandwidth: 4.2e12, hashes: []uint64{1, 0xFFFFFFFFFFFFFFFF, 42}}
	got, err := decodeBenchRecord(r.encode())
	if err != nil || got.median != r.median || got.p90 != r.p90 || got.checked != r.checked || got.wrong != r.wrong ||
		got.worst != r.worst || got.bandwidth != r.bandwidth || len(got.hashes) != 3 || got.hashes[1] != r.hashes[1] {
		t.Errorf("round trip gave %+v, %v", got, err)
	}
	b := r.encode()
	for _, bad := range [][]byte{nil, b[:10], b[:len(b)-1], append(b, 0)} {
		if _, err := decodeBenchRecord(bad); !errors.Is(err, errRecord) {
			t.Errorf("decode of %d bytes: %v, want errRecord", len(bad), err)
		}
	}
}
