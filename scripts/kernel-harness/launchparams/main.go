// Command launchparams answers the kernel benchmark harness
// (scripts/kernel-harness/harness.cu) with what the Go kernel package would
// use for a launch, so that the harness computes none of it itself: the
// skinny kernel's entry point, grid, block, dynamic shared memory, cluster,
// hints and fused receive CTAs (kernel.NewLaunchConfig, Validate,
// ReceiveCTAs, as Kernels.LaunchSkinny launches them), the receive kernel's
// geometry (kernel.ReceiveConfigFor) and the packed weight layout
// (kernel.PackWeight). A developer tool, not part of the product.
//
// It reads requests from stdin, one a line, tab-separated, and answers each
// on stdout before it reads the next, so a harness can run it as a
// coprocess; a file of requests gives a TSV file of answers:
//
//	skinny M SHARD LATENT FAMILY WARPS CLUSTER L2_PREFETCH CLUSTER_POLICY CARVEOUT RECV_COLUMNS
//	  -> ok FUNCTION ROT_FUNCTION GRID_X BLOCK_X SHARED_BYTES CLUSTER CLUSTER_POLICY CARVEOUT TILE_ROWS L2_PREFETCH RECV_CTAS
//	receive M HIDDEN
//	  -> ok FUNCTION ROT_FUNCTION GRID_X BLOCK_X
//	packlen SHARD LATENT
//	  -> ok ELEMENTS
//	pack SHARD LATENT, then SHARD*LATENT little-endian bf16 (row-major), binary
//	  -> ok ELEMENTS, then ELEMENTS little-endian bf16 in the packed layout, binary
//
// FAMILY .. CARVEOUT are the columns of a launch table (kernel.TableHeader).
// RECV_COLUMNS is 0 for a launch without a fused receive, else the columns
// per row its receive polls (hidden, or hidden - shard when it skips its own
// slice); GRID_X then includes the RECV_CTAS receive CTAs. A request the
// kernel package rejects (a config Validate refuses, a bad shape) is
// answered "err MESSAGE" and the next request is read; a request that
// cannot be read ends the command with status 2.
package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/tprun/tprun/kernel"
)

func main() {
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriterSize(os.Stdout, 1<<20)
	if err := serve(in, out); err != nil {
		out.Flush()
		fmt.Fprintf(os.Stderr, "launchparams: %v\n", err)
		os.Exit(2)
	}
}

// errRequest marks a request that cannot be read: the exchange is lost.
var errRequest = errors.New("unreadable request")

// serve answers the requests of in on out until in ends.
func serve(in *bufio.Reader, out *bufio.Writer) error {
	for {
		line, err := in.ReadString('\n')
		if err == io.EOF && line == "" {
			return out.Flush()
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("read a request: %w", err)
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := answer(strings.Split(line, "\t"), in, out); err != nil {
			return fmt.Errorf("%q: %w", line, err)
		}
		if err := out.Flush(); err != nil {
			return fmt.Errorf("write an answer: %w", err)
		}
	}
}

// answer writes the answer to one request (f: its fields).
func answer(f []string, in *bufio.Reader, out *bufio.Writer) error {
	want := map[string]int{"skinny": 10, "receive": 2, "packlen": 2, "pack": 2}
	n, ok := want[f[0]]
	if !ok {
		return fmt.Errorf("%w: no request %q (skinny, receive, packlen, pack)", errRequest, f[0])
	}
	if len(f) != 1+n {
		return fmt.Errorf("%w: %s takes %d fields, got %d", errRequest, f[0], n, len(f)-1)
	}
	nums := make([]int, len(f))
	for i := 1; i < len(f); i++ {
		if f[0] == "skinny" && i == 4 {
			continue // the family
		}
		x, err := strconv.Atoi(f[i])
		if err != nil {
			return fmt.Errorf("%w: field %d: %v", errRequest, i, err)
		}
		nums[i] = x
	}
	switch f[0] {
	case "skinny":
		r, err := skinny(nums[1], nums[2], nums[3], f[4], nums[5], nums[6], nums[7], nums[8], nums[9], nums[10])
		if err != nil {
			return reject(out, err)
		}
		fmt.Fprintf(out, "ok\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", r.Function, r.Function+kernel.RotationSuffix, r.GridX,
			r.BlockX, r.SharedBytes, r.Cluster, r.ClusterPolicy, r.Carveout, r.TileRows, r.L2Prefetch, r.ReceiveCTAs)
	case "receive":
		m, hidden := nums[1], nums[2]
		if m < 1 || m > kernel.MaxSkinnyM || hidden < 8 || hidden%8 != 0 {
			return reject(out, fmt.Errorf("%w: receive of M=%d hidden=%d", kernel.ErrShape, m, hidden))
		}
		c := kernel.ReceiveConfigFor(m, hidden)
		fmt.Fprintf(out, "ok\t%s\t%s\t%d\t%d\n", c.Function, c.Function+kernel.RotationSuffix, c.GridX, c.BlockX)
	case "packlen":
		shard, latent := nums[1], nums[2]
		if shard <= 0 || latent <= 0 {
			return reject(out, fmt.Errorf("%w: a %d×%d weight", kernel.ErrShape, shard, latent))
		}
		fmt.Fprintf(out, "ok\t%d\n", kernel.PackedWeightLen(shard, latent))
	case "pack":
		// The weight follows whatever the answer: a shape that cannot be
		// read leaves no way to skip it.
		shard, latent := nums[1], nums[2]
		if shard <= 0 || latent <= 0 || shard > 1<<20 || latent > 1<<20 {
			return fmt.Errorf("%w: pack of a %d×%d weight", errRequest, shard, latent)
		}
		w, err := readBF16(in, shard*latent)
		if err != nil {
			return fmt.Errorf("%w: the %d×%d weight: %v", errRequest, shard, latent, err)
		}
		p := make([]kernel.BF16, kernel.PackedWeightLen(shard, latent))
		if err := kernel.PackWeight(p, w, shard, latent); err != nil {
			return reject(out, err)
		}
		fmt.Fprintf(out, "ok\t%d\n", len(p))
		return writeBF16(out, p)
	}
	return nil
}

// reject answers a request the kernel package refuses.
func reject(out *bufio.Writer, err error) error {
	_, werr := fmt.Fprintf(out, "err\t%s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
	return werr
}

// launch is a skinny launch as Kernels.LaunchSkinny makes it.
type launch struct {
	kernel.LaunchConfig
	ReceiveCTAs int // added to GridX
}

// skinny is the launch of the given table columns for m rows of a
// shard×latent weight, with a fused receive polling recvCols columns per
// row (0: none): the config Validate accepts, with GridX as LaunchSkinny
// sets the grid.
func skinny(m, shard, latent int, family string, warps, cluster, prefetch, policy, carveout, recvCols int) (launch, error) {
	c, err := kernel.NewLaunchConfig(m, shard, family, warps, cluster)
	if err != nil {
		return launch{}, err
	}
	c.L2Prefetch, c.ClusterPolicy, c.Carveout = prefetch, policy, carveout
	if err := c.Validate(m, shard, latent); err != nil {
		return launch{}, err
	}
	l := launch{LaunchConfig: c}
	switch {
	case recvCols < 0 || recvCols%8 != 0:
		return launch{}, fmt.Errorf("%w: a fused receive of %d columns", kernel.ErrShape, recvCols)
	case recvCols > 0:
		l.ReceiveCTAs = kernel.ReceiveCTAs(m, recvCols, c.BlockX, c.Cluster)
		l.GridX += l.ReceiveCTAs
	}
	return l, nil
}

func readBF16(r io.Reader, n int) ([]kernel.BF16, error) {
	b := make([]byte, 2*n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	w := make([]kernel.BF16, n)
	for i := range w {
		w[i] = kernel.BF16(binary.LittleEndian.Uint16(b[2*i:]))
	}
	return w, nil
}

func writeBF16(w io.Writer, p []kernel.BF16) error {
	b := make([]byte, 2*len(p))
	for i, x := range p {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(x))
	}
	_, err := w.Write(b)
	return err
}
