package job

import (
	"errors"
	"flag"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tprun/tprun/kernel"
)

func parse(args ...string) (*Config, error) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c := RegisterFlags(fs)
	err := fs.Parse(args)
	return c, err
}

func TestDefaults(t *testing.T) {
	c, err := parse()
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Backend: "auto", Mailbox: "auto", M: []int{1, 2, 4, 8}, Iters: 100, Hidden: 7168,
		Latent: 3584, Slots: 3, Seed: 1, Deadline: 10 * time.Second}
	if !reflect.DeepEqual(*c, want) {
		t.Errorf("defaults %+v, want %+v", *c, want)
	}
	if a := c.Args(); len(a) != 0 {
		t.Errorf("Args of the defaults = %q, want none", a)
	}
	if err := c.Validate(8); err != nil {
		t.Errorf("defaults invalid at --tp 8: %v", err)
	}
}

// TestArgsRoundTrip: whatever the launcher parsed reaches the rank intact.
func TestArgsRoundTrip(t *testing.T) {
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	t.Logf("seed %d", seed)
	backends := []string{"auto", "cpu", "cuda"}
	mailboxes := []string{"auto", "multicast", "unicast", "host"}
	for i := 0; i < 200; i++ {
		want := Default()
		want.Backend = backends[rng.IntN(len(backends))]
		want.Mailbox = mailboxes[rng.IntN(len(mailboxes))]
		want.M = rng.Perm(maxM)[:1+rng.IntN(maxM)]
		for j := range want.M {
			want.M[j]++
		}
		want.Iters = 1 + rng.IntN(1000)
		want.Hidden = 1 + rng.IntN(1<<16)
		want.Latent = 1 + rng.IntN(1<<16)
		want.Slots = 2 + rng.IntN(6)
		want.Seed = rng.Int64() - rng.Int64()
		want.Deadline = time.Duration(1+rng.Int64N(int64(time.Hour))) * time.Nanosecond
		if rng.IntN(2) == 0 {
			want.Fault = &Fault{Rank: rng.IntN(16), Step: rng.IntN(1000)}
		}
		got, err := parse(want.Args()...)
		if err != nil {
			t.Fatalf("parse(%q): %v", want.Args(), err)
		}
		if !reflect.DeepEqual(*got, want) {
			t.Fatalf("round trip of %+v via %q gave %+v", want, want.Args(), *got)
		}
	}
}

func TestBadValues(t *testing.T) {
	tests := []struct {
		desc string
		args []string
		want string
	}{
		{"unknown backend", []string{"--backend", "gpu"}, "want one of auto, cpu, cuda"},
		{"unknown mailbox", []string{"--mailbox=nvls"}, "want one of auto, multicast, unicast, host"},
		{"M zero", []string{"--m", "0"}, "M 0 is outside 1..128"},
		{"M past the op", []string{"--m", "1,129"}, "M 129 is outside 1..128"},
		{"M twice", []string{"--m", "2,4,2"}, "M 2 is listed twice"},
		{"M empty", []string{"--m", ""}, "is not an integer"},
		{"M not a number", []string{"--m", "1,x"}, `"x" is not an integer`},
		{"iters zero", []string{"--iters", "0"}, "must be at least 1"},
		{"iters huge", []string{"--iters", "99999999999999"}, "must be at most 1000000000"},
		{"iters not a number", []string{"--iters", "ten"}, "not an integer"},
		{"hidden negative", []string{"--hidden", "-8"}, "must be at least 1"},
		{"latent zero", []string{"--latent", "0"}, "must be at least 1"},
		{"one slot", []string{"--slots", "1"}, "must be at least 2"},
		{"seed not a number", []string{"--seed", "abc"}, "invalid value"},
		{"deadline zero", []string{"--deadline", "0s"}, "must be positive"},
		{"deadline without unit", []string{"--deadline", "10"}, "not a duration"},
		{"fault without step", []string{"--inject-fault", "1"}, "want RANK:STEP"},
		{"fault negative", []string{"--inject-fault", "-1:3"}, "want RANK:STEP"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			_, err := parse(tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parse(%q) = %v, want an error containing %q", tc.args, err, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		desc string
		args []string
		tp   int
		flag string // "" when valid
	}{
		{"defaults at tp 8", nil, 8, ""},
		{"odd tp dividing hidden", []string{"--hidden", "1536"}, 3, ""},
		{"tp not dividing hidden", nil, 3, "hidden"},
		{"cpu with unicast", []string{"--backend", "cpu", "--mailbox", "unicast"}, 2, "mailbox"},
		{"cpu with multicast", []string{"--backend=cpu", "--mailbox=multicast"}, 2, "mailbox"},
		{"cpu with host", []string{"--backend=cpu", "--mailbox=host"}, 2, ""},
		{"cuda with host", []string{"--backend=cuda", "--mailbox=host"}, 2, "mailbox"},
		{"fault rank inside the job", []string{"--inject-fault", "3:10"}, 4, ""},
		{"M 128 on auto", []string{"--m", "1,9,128"}, 2, ""},
		{"M 128 on the CPU", []string{"--backend", "cpu", "--m", "128,100", "--hidden", "1536"}, 3, ""},
		{"M 8 on cuda", []string{"--backend", "cuda", "--m", "8"}, 2, ""},
		{"M 9 on cuda", []string{"--backend", "cuda", "--m", "1,9"}, 2, ""},
		{"M 16 on unicast", []string{"--mailbox", "unicast", "--m", "16"}, 2, ""},
		{"M 128 on multicast", []string{"--mailbox", "multicast", "--m", "128"}, 2, ""},
		{"fault rank outside the job", []string{"--inject-fault", "4:10"}, 4, "inject-fault"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			c, err := parse(tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			err = c.Validate(tc.tp)
			var fe *FlagError
			switch {
			case tc.flag == "" && err != nil:
				t.Errorf("Validate(%d) = %v, want nil", tc.tp, err)
			case tc.flag != "" && (!errors.Is(err, ErrFlag) || !errors.As(err, &fe) || fe.Flag != tc.flag):
				t.Errorf("Validate(%d) = %v, want a FlagError for --%s", tc.tp, err, tc.flag)
			}
		})
	}
}

func TestHidden(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	RegisterFlags(fs)
	var hidden []string
	fs.VisitAll(func(f *flag.Flag) {
		if Hidden(f.Name) {
			hidden = append(hidden, f.Name)
		}
	})
	if !reflect.DeepEqual(hidden, []string{"inject-fault"}) {
		t.Errorf("hidden flags %q", hidden)
	}
}

// TestLimitsMatchKernel: the flag checks' copies of the kernel's limits.
func TestLimitsMatchKernel(t *testing.T) {
	if maxM != kernel.MaxM || maxTP != kernel.MaxTP {
		t.Errorf("maxM %d maxTP %d, kernel.MaxM %d kernel.MaxTP %d", maxM, maxTP, kernel.MaxM, kernel.MaxTP)
	}
	c := Default()
	var fe *FlagError
	if err := c.Validate(kernel.MaxTP + 1); !errors.As(err, &fe) || fe.Flag != "tp" {
		t.Errorf("--tp %d: got %v, want a FlagError on --tp", kernel.MaxTP+1, err)
	}
	c.Hidden = 7168 * 4
	if err := c.Validate(kernel.MaxTP); err != nil {
		t.Errorf("--tp %d: %v", kernel.MaxTP, err)
	}
}
