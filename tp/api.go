package tp

import (
	"errors"
	"fmt"

	"github.com/tprun/tprun/kernel"
	"github.com/tprun/tprun/mailbox"
)

// The types, limits and errors a rank program needs, given here so that
// tp is the one package it imports for the op. They are those of package
// kernel (the shape rules, bf16) and package mailbox (the backends, the
// receive timeout); errors.Is and errors.As match them either way.

// BF16 is a bfloat16 value as its raw bits (the upper half of an IEEE
// float32). Its methods convert it: Float32, Float64, IsNaN, IsInf.
type BF16 = kernel.BF16

// BF16FromFloat32 rounds f to the nearest bf16, ties to even.
func BF16FromFloat32(f float32) BF16 { return kernel.BF16FromFloat32(f) }

// BF16FromFloat64 rounds f to the nearest bf16, ties to even, with one
// rounding.
func BF16FromFloat64(f float64) BF16 { return kernel.BF16FromFloat64(f) }

// BF16ToFloat32 widens b to float32 exactly (b.Float32()).
func BF16ToFloat32(b BF16) float32 { return b.Float32() }

// The shape rules of the op (Shape.Validate checks them all):
//
//   - M, the rows of a step, is in 1..MaxM, and at most the maxM the op
//     was made with (every backend: the GPU path runs the skinny kernels
//     up to M = 8 and a tensor-core kernel above that);
//   - hidden_dim is divisible by the group size (tp, at most MaxTP), and
//     shard_dim = hidden_dim / tp is a multiple of ShardAlign;
//   - latent_dim is a multiple of LatentAlign, at most MaxLatent.
//
// A violation is a *ShapeError naming the value and the rule (errors.Is
// ErrShape); nothing is sent then, and the group can go on.
const (
	MaxM        = kernel.MaxM
	MaxTP       = kernel.MaxTP
	ShardAlign  = kernel.ShardAlign
	LatentAlign = kernel.LatentAlign
	MaxLatent   = kernel.MaxLatent
)

// Shape is the size of one step: M rows, hidden_dim, latent_dim and the
// group size TP. Shard() is hidden_dim / TP.
type Shape = kernel.Shape

// ShapeError names one value that breaks one shape or layout rule.
type ShapeError = kernel.ShapeError

// ErrShape is matched by every shape, layout and buffer-size error.
var ErrShape = kernel.ErrShape

// PreferPacked reports whether the kernels run faster on a shard×latent
// weight in the packed layout than row-major. SetWeight uses it. A caller
// that passes its own device weight per step (DeviceInputs.Weight) packs
// it with PackWeight whatever it reports: the kernels read only the
// packed layout.
func PreferPacked(shard, latent int) bool { return kernel.PreferPacked(shard, latent) }

// PackedWeightLen is the number of bf16 elements of a shard×latent weight
// in the packed layout.
func PackedWeightLen(shard, latent int) int { return kernel.PackedWeightLen(shard, latent) }

// PackWeight writes the row-major [shard, latent] weight w into dst
// (PackedWeightLen elements) in the packed layout.
func PackWeight(dst, w []BF16, shard, latent int) error {
	return kernel.PackWeight(dst, w, shard, latent)
}

// BackendKind names a mailbox backend as a caller asks for it (WithBackend).
type BackendKind = mailbox.Kind

// The backends. BackendAuto, the default, resolves collectively from
// every rank's device: multicast where allowed and supported, else
// unicast (both on the CUDA engine), else host (the CPU and shared
// memory) where some rank has no usable GPU.
const (
	BackendAuto      = mailbox.KindAuto
	BackendMulticast = mailbox.KindMulticast
	BackendUnicast   = mailbox.KindUnicast
	BackendHost      = mailbox.KindHost
)

// ParseBackend parses "auto", "multicast", "unicast" or "host" (case and
// surrounding space ignored; "" is auto).
func ParseBackend(s string) (BackendKind, error) { return mailbox.ParseKind(s) }

// Exchanger is what the op needs from its group: rank, size and the
// collectives. A *Group is one; tests run ranks as goroutines with others.
type Exchanger = mailbox.Exchanger

// TimeoutError is a step whose peers' slices did not all arrive within the
// deadline (WithDeadline): Missing names the ranks, OtherM the ranks that
// ran the step with another M. It matches ErrTimeout.
type TimeoutError = mailbox.TimeoutError

// RankRows is a rank and the row count it used (TimeoutError.OtherM).
type RankRows = mailbox.RankRows

// The op's errors beside those of errors.go, matched with errors.Is.
var (
	// ErrTimeout: a step's receive ran past its deadline (*TimeoutError).
	ErrTimeout = mailbox.ErrTimeout
	// ErrBroken: an earlier step failed (a timeout, a cancelled wait), so
	// the mailbox slots no longer follow the protocol and the op refuses
	// further steps. Close it; the job should end.
	ErrBroken = mailbox.ErrBroken
	// ErrClosed: the op, or the step graph, was closed.
	ErrClosed = mailbox.ErrClosed
	// ErrConfig: a bad option (WithSlots, WithDeadline), or ranks that
	// disagree about the op's shape.
	ErrConfig = mailbox.ErrConfig
	// ErrArgument: a bad argument other than a shape (a negative replay
	// count, an empty capture, a row-major DeviceInputs.Weight).
	ErrArgument = mailbox.ErrArgument
	// ErrPeer: another rank failed during a collective step of the op
	// (setup, a step check); the error names it.
	ErrPeer = mailbox.ErrPeer
	// ErrMulticastDisabled: the multicast backend was asked for while the
	// environment forbids it; the error names the variable.
	ErrMulticastDisabled = mailbox.ErrMulticastDisabled
)

// MailboxBytes is the size in bytes of one rank's mailbox for an op of
// hidden_dim hidden and largest M maxM, with slots mailbox slots (0: the
// default, 3; see WithSlots). Each slot holds a region of m rows for every
// m in 1..min(maxM, 8) and, when maxM is larger, one region of maxM rows
// that every M past 8 shares; a row is hidden bf16 elements, and each slot
// is rounded up to 64 bytes. Every rank holds one per op (the unicast
// mailbox also maps every peer's); a GPU backend rounds the allocation up
// to the driver's allocation granularity. It needs no group: hidden is a
// positive multiple of ShardAlign and maxM in 1..MaxM, else a *ShapeError;
// slots below 2 other than 0 give ErrConfig.
func MailboxBytes(hidden, maxM, slots int) (int, error) {
	var bad []error
	if hidden < 1 || hidden%ShardAlign != 0 {
		bad = append(bad, &ShapeError{Field: "hidden", Value: hidden, Rule: fmt.Sprintf("must be a positive multiple of %d", ShardAlign)})
	}
	if maxM < 1 || maxM > MaxM {
		bad = append(bad, &ShapeError{Field: "maxM", Value: maxM, Rule: fmt.Sprintf("must be in 1..%d", MaxM)})
	}
	if err := errors.Join(bad...); err != nil {
		return 0, err
	}
	l, err := mailbox.NewLayout(mailbox.Config{Hidden: hidden, Capacity: maxM, Slots: slots}, 1)
	if err != nil {
		return 0, fmt.Errorf("tp: mailbox of hidden %d, maxM %d, %d slots: %w", hidden, maxM, slots, err)
	}
	return l.Bytes, nil
}
