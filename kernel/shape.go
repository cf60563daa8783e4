package kernel

import (
	"errors"
	"fmt"
)

// Limits and alignments of the fused op.
const (
	// MaxM is the largest row count of one step of the op: the reference,
	// the CPU kernel and the host backend take any M in 1..MaxM.
	MaxM = 128
	// MaxSkinnyM is the largest row count of the GPU skinny kernels (one
	// entry point per M, M rows held in registers); LaunchSkinny runs a
	// larger M on the larger-M kernel (bigm.cu, BigmConfigFor), which has
	// no fused receive.
	MaxSkinnyM = 8
	// MaxTP is the largest number of ranks (mailbox destinations).
	MaxTP = 16
	// ShardAlign: shard_dim is a multiple of this many elements, so that a
	// rank's columns start on a 16-byte boundary (rank*shard_dim*2 bytes)
	// and are written with whole 16-byte stores. It also keeps every packed
	// 32-bit mailbox word inside one rank's slice.
	ShardAlign = 8
	// LatentAlign: latent_dim is a multiple of this many elements, so that
	// every weight and latent row starts on a 16-byte boundary for 16-byte
	// loads.
	LatentAlign = 8
	// MaxLatent bounds latent_dim so that the fp32 accumulation error bound
	// used by Tolerance stays meaningful (latent_dim * 2^-24 <= 1/16).
	MaxLatent = 1 << 20
)

// ErrShape is wrapped by every shape, layout and capacity error.
var ErrShape = errors.New("kernel: invalid shape")

// ShapeError names one value that breaks one rule.
type ShapeError struct {
	Field string // e.g. "M", "hidden_dim % tp", "len(shared)"
	Value int
	Rule  string // e.g. "must be in 1..128"
}

func (e *ShapeError) Error() string {
	return fmt.Sprintf("%v: %s = %d: %s", ErrShape, e.Field, e.Value, e.Rule)
}

// Unwrap makes errors.Is(err, ErrShape) hold.
func (e *ShapeError) Unwrap() error { return ErrShape }

// Shape is the size of one step of the fused op. The latent block is
// [M, Latent], the full weight [Hidden, Latent], and each of TP ranks owns
// Shard() = Hidden/TP rows of the weight and columns of the output.
type Shape struct {
	M, Hidden, Latent, TP int
}

// Shard is shard_dim = Hidden / TP (0 when TP is not positive).
func (s Shape) Shard() int {
	if s.TP <= 0 {
		return 0
	}
	return s.Hidden / s.TP
}

func (s Shape) String() string {
	return fmt.Sprintf("M=%d hidden=%d latent=%d tp=%d", s.M, s.Hidden, s.Latent, s.TP)
}

// Validate checks the shape against the rules of the op and
// returns every violated rule, each as a *ShapeError wrapping ErrShape
// (joined with errors.Join when there are several), or nil.
func (s Shape) Validate() error {
	var errs []error
	bad := func(field string, v int, rule string) {
		errs = append(errs, &ShapeError{Field: field, Value: v, Rule: rule})
	}
	if s.M < 1 || s.M > MaxM {
		bad("M", s.M, fmt.Sprintf("must be in 1..%d", MaxM))
	}
	if s.Latent < 1 {
		bad("latent_dim", s.Latent, "must be positive")
	} else if s.Latent > MaxLatent {
		bad("latent_dim", s.Latent, fmt.Sprintf("must be at most %d (fp32 accumulation error bound)", MaxLatent))
	} else if s.Latent%LatentAlign != 0 {
		bad("latent_dim", s.Latent, fmt.Sprintf("must be a multiple of %d (16-byte weight and latent rows)", LatentAlign))
	}
	tpOK := s.TP >= 1 && s.TP <= MaxTP
	if !tpOK {
		bad("tp", s.TP, fmt.Sprintf("must be in 1..%d (mailbox destinations)", MaxTP))
	}
	if s.Hidden < 1 {
		bad("hidden_dim", s.Hidden, "must be positive")
	} else if tpOK {
		if r := s.Hidden % s.TP; r != 0 {
			bad("hidden_dim % tp", r, fmt.Sprintf("must be 0 (hidden_dim %d, tp %d)", s.Hidden, s.TP))
		} else if sh := s.Shard(); sh%ShardAlign != 0 {
			bad("shard_dim", sh, fmt.Sprintf("must be a multiple of %d (16-byte aligned slices; hidden_dim %d / tp %d)", ShardAlign, s.Hidden, s.TP))
		}
	}
	return errors.Join(errs...)
}

// Layout gives the element counts and row strides of one rank's operands.
// It is a separate type, not slices, so that the same checks serve Go
// slices and device buffers.
type Layout struct {
	LatentLen    int // [M, Latent], row stride Latent
	WeightLen    int // [Shard, Latent], row stride Latent
	SharedLen    int // [M, Shard], row stride SharedStride
	SharedStride int
	OutLen       int // [M, Shard], row stride OutStride; OutLen < 0 skips the output checks
	OutStride    int
}

// ValidateLayout checks l against the shape (which must itself be valid)
// and returns every violated rule as in Validate. Strided buffers need
// (M-1)*stride + shard elements: the last row need not be padded.
func (s Shape) ValidateLayout(l Layout) error {
	var errs []error
	bad := func(field string, v int, rule string) {
		errs = append(errs, &ShapeError{Field: field, Value: v, Rule: rule})
	}
	shard := s.Shard()
	if want := s.M * s.Latent; l.LatentLen < want {
		bad("len(latent)", l.LatentLen, fmt.Sprintf("must be at least M*latent_dim = %d*%d = %d", s.M, s.Latent, want))
	}
	if want := shard * s.Latent; l.WeightLen < want {
		bad("len(weight shard)", l.WeightLen, fmt.Sprintf("must be at least shard_dim*latent_dim = %d*%d = %d", shard, s.Latent, want))
	}
	strided := func(name string, n, stride int) {
		if stride < shard {
			bad(name+" row stride", stride, fmt.Sprintf("must be at least shard_dim (%d)", shard))
			return
		}
		if want := (s.M-1)*stride + shard; n < want {
			bad("len("+name+")", n, fmt.Sprintf("must be at least (M-1)*stride+shard_dim = %d*%d+%d = %d", s.M-1, stride, shard, want))
		}
	}
	strided("shared", l.SharedLen, l.SharedStride)
	if l.OutLen >= 0 {
		strided("out", l.OutLen, l.OutStride)
	}
	return errors.Join(errs...)
}

// validateOperands is the common entry check of the functions that take
// slices; op names the caller in the error.
func validateOperands(op string, s Shape, l Layout) error {
	if err := s.Validate(); err != nil {
		return fmt.Errorf("kernel: %s (%v): %w", op, s, err)
	}
	if err := s.ValidateLayout(l); err != nil {
		return fmt.Errorf("kernel: %s (%v): %w", op, s, err)
	}
	return nil
}
