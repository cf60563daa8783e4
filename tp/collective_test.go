package tp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tprun/tprun/internal/hub"
)

// TestCollectiveTimeoutGroup: goroutine ranks under srun (rank 0 hosts the
// hub) and under the launcher's hub; one rank joins and then never calls
// the collective. The others, whose ctx has no deadline, fail after the
// timeout with an error naming the collective and the missing rank, and
// so does the missing rank's next call.
func TestCollectiveTimeoutGroup(t *testing.T) {
	host, _ := os.Hostname()
	cases := []struct {
		desc     string
		launcher bool
		opt      time.Duration // WithCollectiveTimeout; 0: none
		env      string        // TPRUN_COLLECTIVE_TIMEOUT; "": unset
		want     time.Duration
		missing  int
	}{
		{"srun, option", false, 250 * time.Millisecond, "", 250 * time.Millisecond, 2},
		{"srun, environment in seconds", false, 0, "0.3", 300 * time.Millisecond, 1},
		{"srun, option wins over the environment", false, 200 * time.Millisecond, "1h", 200 * time.Millisecond, 0},
		{"launcher, environment as a duration", true, 0, "350ms", 350 * time.Millisecond, 2},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			const n = 3
			env := func(int) map[string]string { return nil }
			if tc.launcher {
				token := fmt.Sprintf("%x", rand.Uint64())
				// The launcher's hub knows nothing of the ranks' timeouts:
				// its own default must not be what fires.
				srv, err := hub.Listen(hub.ServerConfig{WorldSize: n, Token: token})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				served := make(chan error, 1)
				go func() { served <- srv.Serve(ctx) }()
				t.Cleanup(func() {
					cancel()
					if err := <-served; err != nil {
						t.Error(err)
					}
					if err := srv.Close(); err != nil {
						t.Error(err)
					}
				})
				env = func(r int) map[string]string { return launcherEnv(srv.Path(), token, r, n) }
			} else {
				tmp, job := shortTempDir(t), newJobID()
				env = func(r int) map[string]string { return srunEnv(tmp, job, r, n) }
			}
			withTimeout := func(r int) map[string]string {
				e := env(r)
				if tc.env != "" {
					e = withEnv(e, EnvCollectiveTimeout, tc.env)
				}
				return e
			}
			var opts []JoinOption
			if tc.opt != 0 {
				opts = append(opts, WithCollectiveTimeout(tc.opt))
			}
			waiting := make(chan struct{}, n)
			errs := runRanks(t, n, withTimeout, opts, func(r int, g *Group) error {
				if err := g.Barrier(context.Background()); err != nil {
					return fmt.Errorf("first barrier: %w", err)
				}
				if r == tc.missing {
					// Alive, connected, and busy elsewhere: its next call
					// comes after the others have failed.
					for range n - 1 {
						<-waiting
					}
					_, err := g.AllGather(context.Background(), []byte("late"))
					return checkTimeout(err, tc.missing, tc.want, host)
				}
				start := time.Now()
				_, err := g.AllGather(context.Background(), []byte{byte(r)})
				took := time.Since(start)
				waiting <- struct{}{}
				if err := checkTimeout(err, tc.missing, tc.want, host); err != nil {
					return err
				}
				if took < tc.want || took > tc.want+2*time.Second {
					return fmt.Errorf("failed after %v, want about %v", took, tc.want)
				}
				if r == (tc.missing+1)%n {
					t.Logf("rank %d got: %v", r, err)
				}
				return nil
			})
			noErrors(t, errs)
		})
	}
}

// checkTimeout says what is wrong with err as the timeout of AllGather #2
// missing rank missing after want.
func checkTimeout(err error, missing int, want time.Duration, host string) error {
	var ce *CollectiveTimeoutError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCollectiveTimeout) || !errors.Is(err, ErrAborted) {
		return fmt.Errorf("got %v, want a *CollectiveTimeoutError", err)
	}
	if ce.Collective != "AllGather" || ce.Seq != 2 || !slices.Equal(ce.Missing, []int{missing}) || ce.After != want ||
		!slices.Equal(ce.Hosts, []string{host}) || !slices.Equal(ce.PIDs, []int{os.Getpid()}) {
		return fmt.Errorf("got %+v, want AllGather #2 missing rank %d on %s after %v", ce, missing, host, want)
	}
	msg := fmt.Sprintf("AllGather #2 timed out after %v: rank %d (pid %d on %s) never joined it (tp.WithCollectiveTimeout or TPRUN_COLLECTIVE_TIMEOUT sets this limit)",
		want, missing, os.Getpid(), host)
	if !strings.Contains(err.Error(), msg) {
		return fmt.Errorf("message %q does not say %q", err, msg)
	}
	return nil
}

func TestCollectiveTimeoutSetting(t *testing.T) {
	cases := []struct {
		desc    string
		opt     time.Duration
		env     string
		want    time.Duration
		wantErr string
	}{
		{"default", 0, "", DefaultCollectiveTimeout, ""},
		{"seconds", 0, "600", 10 * time.Minute, ""},
		{"fractional seconds", 0, " 1.5 ", 1500 * time.Millisecond, ""},
		{"duration", 0, "2m30s", 150 * time.Second, ""},
		{"option wins", 7 * time.Second, "600", 7 * time.Second, ""},
		{"zero", 0, "0", 0, "TPRUN_COLLECTIVE_TIMEOUT=\"0\": not a positive duration"},
		{"negative", 0, "-5s", 0, "not a positive duration"},
		{"words", 0, "forever", 0, "not a positive duration"},
		{"NaN", 0, "NaN", 0, "not a positive duration"},
		{"too long", 0, "1e300", 0, "not a positive duration"},
		{"negative option", -time.Second, "", 0, "WithCollectiveTimeout(-1s): the timeout must be positive"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := joinConfig{collective: tc.opt, lookup: func(k string) (string, bool) {
				if k == EnvCollectiveTimeout && tc.env != "" {
					return tc.env, true
				}
				return "", false
			}}
			got, err := collectiveTimeout(cfg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, %v; want an error saying %q", got, err, tc.wantErr)
				}
				if tc.env != "" && !errors.Is(err, ErrEnv) {
					t.Errorf("%v is not ErrEnv", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	// A bad value stops Join before it connects anywhere.
	env := withEnv(srunEnv(shortTempDir(t), newJobID(), 0, 1), EnvCollectiveTimeout, "soon")
	if _, err := Join(context.Background(), WithEnv(env)); !errors.Is(err, ErrEnv) || !strings.Contains(err.Error(), EnvCollectiveTimeout) {
		t.Errorf("Join with a bad %s: %v", EnvCollectiveTimeout, err)
	}
}

// rankProcessEnv marks the test binary started as a rank process by
// TestCollectiveTimeoutProcesses.
const rankProcessEnv = "TPRUN_TEST_COLLECTIVE_RANK"

// TestCollectiveTimeoutProcesses: rank processes started the way srun
// starts them; the last one joins and then sleeps instead of joining a
// barrier. The others exit with the timeout's error within the timeout
// and a margin, the sleeper's next call fails at once with the same, and
// no process is left.
func TestCollectiveTimeoutProcesses(t *testing.T) {
	if os.Getenv(rankProcessEnv) != "" {
		rankProcess()
		return
	}
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	const n = 3
	tmp, job := shortTempDir(t), newJobID()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmds := make([]*exec.Cmd, n)
	outs := make([]*bytes.Buffer, n)
	start := time.Now()
	for r := range n {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCollectiveTimeoutProcesses$")
		cmd.Env = append(os.Environ(), rankProcessEnv+"=1", EnvCollectiveTimeout+"=400ms")
		for k, v := range srunEnv(tmp, job, r, n) {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		outs[r] = &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = outs[r], outs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	took := make([]time.Duration, n)
	var wg sync.WaitGroup
	for r, cmd := range cmds {
		wg.Go(func() {
			_ = cmd.Wait()
			took[r] = time.Since(start)
		})
	}
	wg.Wait()
	for r, cmd := range cmds {
		out := outs[r].String()
		if code := cmd.ProcessState.ExitCode(); code != 3 {
			t.Errorf("rank %d: exit %d, want 3\n%s", r, code, out)
		}
		want := fmt.Sprintf("Barrier #2 timed out after 400ms: rank %d (pid %d on ", n-1, cmds[n-1].Process.Pid)
		if !strings.Contains(out, want) || !strings.Contains(out, "TPRUN_COLLECTIVE_TIMEOUT sets this limit") {
			t.Errorf("rank %d does not say %q:\n%s", r, want, out)
		}
		if r < n-1 && took[r] > 10*time.Second {
			t.Errorf("rank %d ended after %v", r, took[r])
		}
	}
	t.Logf("rank 0 printed: %s", strings.TrimSpace(outs[0].String()))
}

// rankProcess is one rank of TestCollectiveTimeoutProcesses: it exits 3
// with the error of the barrier it fails in, 0 if it never fails.
func rankProcess() {
	ctx := context.Background()
	g, err := Join(ctx, WithTimeout(20*time.Second))
	if err != nil {
		fmt.Println("join:", err)
		os.Exit(2)
	}
	code := 0
	if err := g.Barrier(ctx); err != nil {
		fmt.Println("first barrier:", err)
		os.Exit(2)
	}
	if g.Rank() == g.Size()-1 {
		// Busy elsewhere while the others wait; the hub's verdict is
		// waiting for this rank's next call.
		time.Sleep(1500 * time.Millisecond)
	}
	if err := g.Barrier(ctx); err != nil {
		fmt.Println("rank", g.Rank(), "barrier:", err)
		code = 3
	}
	if err := g.Close(); err != nil && code == 0 {
		fmt.Println("close:", err)
		code = 2
	}
	os.Exit(code)
}
