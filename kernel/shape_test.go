package kernel

import (
	"errors"
	"strings"
	"testing"
)

func TestShapeValidate(t *testing.T) {
	tests := []struct {
		desc  string
		s     Shape
		wants []string // substrings of the error; nil means valid
	}{
		{"Kimi K3 at TP 8", Shape{M: 1, Hidden: 7168, Latent: 3584, TP: 8}, nil},
		{"Kimi K3 at TP 16, M 8", Shape{M: 8, Hidden: 7168, Latent: 3584, TP: 16}, nil},
		{"odd TP 7 divides 7168", Shape{M: 3, Hidden: 7168, Latent: 3584, TP: 7}, nil},
		{"TP 1", Shape{M: 2, Hidden: 64, Latent: 8, TP: 1}, nil},
		{"4096/1024 at TP 4", Shape{M: 4, Hidden: 4096, Latent: 1024, TP: 4}, nil},
		{"M 9, past the GPU skinny kernels, is an op shape", Shape{M: 9, Hidden: 7168, Latent: 3584, TP: 8}, nil},
		{"M 128 at TP 3", Shape{M: 128, Hidden: 7152, Latent: 3584, TP: 3}, nil},
		{"M 0", Shape{M: 0, Hidden: 7168, Latent: 3584, TP: 8}, []string{"M = 0", "1..128"}},
		{"M 129 is past the op", Shape{M: 129, Hidden: 7168, Latent: 3584, TP: 8}, []string{"M = 129", "1..128"}},
		{"hidden not divisible by tp", Shape{M: 1, Hidden: 7168, Latent: 3584, TP: 5}, []string{"hidden_dim % tp = 3", "hidden_dim 7168, tp 5"}},
		{"shard not a multiple of 8", Shape{M: 1, Hidden: 7172, Latent: 3584, TP: 4}, []string{"shard_dim = 1793", "multiple of 8"}},
		{"latent not a multiple of 8", Shape{M: 1, Hidden: 7168, Latent: 3585, TP: 8}, []string{"latent_dim = 3585", "multiple of 8"}},
		{"latent past the accumulation bound", Shape{M: 1, Hidden: 64, Latent: MaxLatent + 8, TP: 1}, []string{"latent_dim = 1048584", "at most 1048576"}},
		{"latent zero", Shape{M: 1, Hidden: 7168, Latent: 0, TP: 8}, []string{"latent_dim = 0", "positive"}},
		{"hidden negative", Shape{M: 1, Hidden: -8, Latent: 8, TP: 1}, []string{"hidden_dim = -8", "positive"}},
		{"tp 0", Shape{M: 1, Hidden: 7168, Latent: 3584, TP: 0}, []string{"tp = 0", "1..16"}},
		{"tp 17 is more destinations than allowed", Shape{M: 1, Hidden: 17 * 64, Latent: 3584, TP: 17}, []string{"tp = 17", "1..16"}},
		{"several faults are all named", Shape{M: 200, Hidden: 7168, Latent: 12, TP: 3}, []string{"M = 200", "latent_dim = 12", "hidden_dim % tp = 1"}},
	}
	for _, tc := range tests {
		err := tc.s.Validate()
		if tc.wants == nil {
			if err != nil {
				t.Errorf("%s: %v: unexpected error %v", tc.desc, tc.s, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: %v: no error", tc.desc, tc.s)
			continue
		}
		if !errors.Is(err, ErrShape) {
			t.Errorf("%s: error %v does not wrap ErrShape", tc.desc, err)
		}
		var se *ShapeError
		if !errors.As(err, &se) {
			t.Errorf("%s: error %v holds no *ShapeError", tc.desc, err)
		}
		for _, w := range tc.wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", tc.desc, err, w)
			}
		}
	}
}

func TestShard(t *testing.T) {
	for _, tc := range []struct {
		desc string
		s    Shape
		want int
	}{
		{"TP 8", Shape{Hidden: 7168, TP: 8}, 896},
		{"TP 7", Shape{Hidden: 7168, TP: 7}, 1024},
		{"TP 0 does not divide by zero", Shape{Hidden: 7168}, 0},
	} {
		if got := tc.s.Shard(); got != tc.want {
			t.Errorf("%s: Shard() = %d, want %d", tc.desc, got, tc.want)
		}
	}
}

func TestValidateLayout(t *testing.T) {
	s := Shape{M: 4, Hidden: 1024, Latent: 64, TP: 4} // shard 256
	good := Layout{LatentLen: 4 * 64, WeightLen: 256 * 64, SharedLen: 3*1024 + 256, SharedStride: 1024, OutLen: 4 * 256, OutStride: 256}
	tests := []struct {
		desc   string
		change func(*Layout)
		wants  []string
	}{
		{"exact lengths pass", func(*Layout) {}, nil},
		{"output checks skipped", func(l *Layout) { l.OutLen, l.OutStride = -1, 0 }, nil},
		{"latent short", func(l *Layout) { l.LatentLen-- }, []string{"len(latent) = 255", "M*latent_dim = 4*64 = 256"}},
		{"weight short", func(l *Layout) { l.WeightLen = 64 * 64 }, []string{"len(weight shard) = 4096", "16384"}},
		{"shared stride below shard", func(l *Layout) { l.SharedStride = 255 }, []string{"shared row stride = 255", "shard_dim (256)"}},
		{"shared short for its stride", func(l *Layout) { l.SharedLen = 4 * 256 }, []string{"len(shared) = 1024", "(M-1)*stride+shard_dim = 3*1024+256 = 3328"}},
		{"out stride below shard", func(l *Layout) { l.OutStride = 8 }, []string{"out row stride = 8"}},
		{"out short", func(l *Layout) { l.OutLen = 3*256 + 255 }, []string{"len(out) = 1023"}},
	}
	for _, tc := range tests {
		l := good
		tc.change(&l)
		err := s.ValidateLayout(l)
		if tc.wants == nil {
			if err != nil {
				t.Errorf("%s: unexpected error %v", tc.desc, err)
			}
			continue
		}
		if err == nil || !errors.Is(err, ErrShape) {
			t.Errorf("%s: error %v, want one wrapping ErrShape", tc.desc, err)
			continue
		}
		for _, w := range tc.wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", tc.desc, err, w)
			}
		}
	}
}
