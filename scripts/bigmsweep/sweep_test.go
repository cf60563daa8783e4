package bigmsweep

import (
	"bufio"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tprun/tprun/internal/cuda"
	"github.com/tprun/tprun/kernel"
)

// The fake's settings, passed in the environment.
const (
	envFake   = "BIGM_SWEEP_FAKE"        // "1": this binary is the fake tprun or python; "validate": load the table, exit
	envLog    = "BIGM_SWEEP_FAKE_LOG"    // where the fake appends every row it reports
	envSeed   = "BIGM_SWEEP_FAKE_SEED"   // the seed of the fake's figures
	envRefuse = "BIGM_SWEEP_FAKE_REFUSE" // a config the fake refuses as tprun refuses an invalid table
)

func TestMain(m *testing.M) {
	switch os.Getenv(envFake) {
	case "1":
		os.Exit(fake(os.Args[1:]))
	case "validate":
		if _, err := kernel.Load(nopDriver{}); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// nopDriver lets kernel.Load run on the CPU: it validates the tables first.
type nopDriver struct{}

func (nopDriver) ModuleLoadData([]byte) (cuda.Module, error)                    { return 1, nil }
func (nopDriver) ModuleUnload(cuda.Module) error                                { return nil }
func (nopDriver) ModuleGetFunction(cuda.Module, string) (cuda.Function, error)  { return 1, nil }
func (nopDriver) FuncSetAttribute(cuda.Function, cuda.FuncAttribute, int) error { return nil }
func (nopDriver) LaunchKernelEx(cuda.LaunchConfig, cuda.Function, ...[]byte) error {
	return nil
}

// logRow is one row the fake reported.
type logRow struct {
	Final  bool    `json:"final"` // a run of the picked table
	Shard  int     `json:"shard"`
	M      int     `json:"m"`
	Config string  `json:"config"`
	Median float64 `json:"median"` // as the script reads it
	Wrong  int     `json:"wrong"`
}

// fake is tprun bench (args "bench ..."), the PyTorch baseline (a script
// path first) or python -c (the version query).
func fake(args []string) int {
	if len(args) > 0 && args[0] == "-c" {
		fmt.Println("fake 0 CUDA none")
		return 0
	}
	flags := map[string]string{}
	for i := 0; i+1 < len(args); i++ {
		if strings.HasPrefix(args[i], "--") {
			flags[args[i][2:]] = args[i+1]
		}
	}
	seed, _ := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
	if len(args) == 0 || args[0] != "bench" {
		return fakeTorch(flags, seed)
	}
	if _, err := kernel.Load(nopDriver{}); err != nil {
		fmt.Fprintf(os.Stderr, "tprun: job: bench: rank 0: %v\n", err)
		return 1
	}
	table := os.Getenv(kernel.BigmTableEnv)
	final := filepath.Base(table) == "bigm_table.tsv"
	hidden, _ := strconv.Atoi(flags["hidden"])
	cfgs, err := tableConfigs(table, hidden)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var ms []int
	for _, s := range strings.Split(flags["m"], ",") {
		m, _ := strconv.Atoi(s)
		ms = append(ms, m)
	}
	if r := os.Getenv(envRefuse); r != "" && !final && slices.Contains(cfgsOf(cfgs), r) {
		fmt.Fprintf(os.Stderr, "tprun: job: bench: rank 0: kernel: load kernels: the larger-M table: kernel: %s line 3: refused by the fake\n", table)
		return 1
	}
	// Each invocation draws its own noise, a crash after the first M (no
	// JSON, the rows printed so far) and wrong blocks.
	rng := rand.New(rand.NewPCG(seed, uint64(time.Now().UnixNano())))
	crash := !final && rng.IntN(12) == 0
	f, err := os.OpenFile(os.Getenv(envLog), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	const bw = 4.2 // TB/s
	floor := float64(2*hidden*3584) / (bw * 1e12) * 1e6
	var rows []map[string]any
	fmt.Printf("[rank 0] # copy bandwidth (read + write, 1024 MiB device-to-device copy) per rank: %.2f TB/s; HBM floor = ...\n", bw)
	ok := true
	for i, m := range ms {
		c := cfgs[kernel.BigmCode(m)]
		med := base(seed, hidden, c, m) * (1 + 0.02*rng.Float64())
		wrong := 0
		if rng.IntN(15) == 0 && !final {
			wrong = 1 + rng.IntN(100)
			ok = false
		}
		seen := med
		if crash {
			seen = math.Round(med*100) / 100 // the printed row's precision
		}
		fmt.Printf("[rank 0] %4v %10.2f %10.2f %10.2f %7.2f %12.0f %8.2f %7v %9v\n", m, med, med*1.05, floor, med/floor, 1e3, 0.5, wrong, "yes")
		if err := enc.Encode(logRow{Final: final, Shard: hidden, M: m, Config: c, Median: seen, Wrong: wrong}); err != nil {
			return 2
		}
		rows = append(rows, map[string]any{"m": m, "median_us": med, "p90_us": med * 1.05, "floor_us": floor, "wrong": wrong, "identical": true})
		if crash && i == 0 {
			fmt.Fprintln(os.Stderr, "tprun: job: bench: rank 0: M=32: CUDA_ERROR_LAUNCH_FAILED (the fake)")
			return 1
		}
	}
	doc := map[string]any{"gpus": []map[string]any{{"rank": 0, "copy_tb_per_s": bw, "name": "fake"}}, "rows": rows, "ok": ok}
	b, _ := json.Marshal(doc)
	if err := os.WriteFile(flags["json-out"], b, 0o644); err != nil {
		return 2
	}
	if !ok {
		return 1
	}
	return 0
}

// base is the fake's typical time of config c at hidden and m.
func base(seed uint64, hidden int, c string, m int) float64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d/%s/%d", seed, hidden, c, m)
	return 2 + float64(h.Sum64()%10000)/1000
}

func fakeTorch(flags map[string]string, seed uint64) int {
	f, err := os.Create(flags["out"])
	if err != nil {
		return 2
	}
	defer f.Close()
	for _, hs := range strings.Split(flags["hidden"], ",") {
		h, _ := strconv.Atoi(hs)
		for _, ms := range strings.Split(flags["m"], ",") {
			m, _ := strconv.Atoi(ms)
			fmt.Fprintf(f, `{"hidden": %d, "shard": %d, "m": %d, "torch_us": %.3f, "allgather_us": null}`+"\n", h, h, m, torchUS(seed, h, m))
		}
	}
	return 0
}

func torchUS(seed uint64, hidden, m int) float64 { return 5 + base(seed, hidden, "torch", m) }

// tableConfigs reads a bigm table's rows of one shard: code size -> the
// config as the script writes it.
func tableConfigs(path string, shard int) (map[int]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[int]string{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 9 || strings.HasPrefix(line, "#") || f[0] == "latent" || f[1] != strconv.Itoa(shard) {
			continue
		}
		mt, _ := strconv.Atoi(f[2])
		c := strings.Join(f[3:7], "/")
		if f[7] == "0" {
			c += "/np"
		}
		out[mt] = c
	}
	return out, nil
}

func cfgsOf(m map[int]string) []string {
	var out []string
	for _, c := range m {
		out = append(out, c)
	}
	return out
}

// sweep runs scripts/bigm-sweep against the fakes in a fresh folder and
// returns it, the script's exit code and the rows the fake reported.
func sweep(t *testing.T, seed uint64, extra map[string]string, args ...string) (string, int, []logRow) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not on PATH")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script, _ := filepath.Abs(filepath.Join("..", "bigm-sweep"))
	cmd := exec.Command(py, append([]string{script, "--tprun", self, "--python", self, "--torch", "torch.py",
		"--work", filepath.Join(dir, "work"), "--report", filepath.Join(dir, "report.txt")}, args...)...)
	cmd.Env = append(os.Environ(), envFake+"=1", envLog+"="+filepath.Join(dir, "fake.jsonl"),
		envSeed+"="+strconv.FormatUint(seed, 10), "OUT="+filepath.Join(dir, "out"), kernel.FatbinEnv+"=")
	for k, v := range extra {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("bigm-sweep: %v\n%s", err, out)
	}
	t.Logf("bigm-sweep (seed %d) exit %d:\n%s", seed, code, out)
	var rows []logRow
	if f, err := os.Open(filepath.Join(dir, "fake.jsonl")); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var r logRow
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatal(err)
			}
			rows = append(rows, r)
		}
	}
	return dir, code, rows
}

type key struct {
	shard, mt int
}

// want is the pick from what the fake reported: per (shard, MT) the config
// with the lowest median over its runs, among configs never wrong there.
func want(rows []logRow, order map[int][]string) map[key]string {
	meds := map[key]map[string][]float64{}
	bad := map[key]map[string]bool{}
	for _, r := range rows {
		if r.Final {
			continue
		}
		k := key{r.Shard, r.M}
		if meds[k] == nil {
			meds[k], bad[k] = map[string][]float64{}, map[string]bool{}
		}
		if r.Wrong > 0 {
			bad[k][r.Config] = true
			continue
		}
		meds[k][r.Config] = append(meds[k][r.Config], r.Median)
	}
	picks := map[key]string{}
	for k, byCfg := range meds {
		best, bestMed := "", math.Inf(1)
		for _, c := range order[k.shard] {
			v, ok := byCfg[c]
			if !ok || bad[k][c] {
				continue
			}
			if med := median(v); med < bestMed {
				best, bestMed = c, med
			}
		}
		if best != "" {
			picks[k] = best
		}
	}
	return picks
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// readTSV reads a TSV file's data rows (comments and the header skipped).
func readTSV(t *testing.T, path, header string) [][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	seen := false
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		if !seen {
			if line != header {
				t.Fatalf("%s: header %q, want %q", path, line, header)
			}
			seen = true
			continue
		}
		out = append(out, strings.Split(line, "\t"))
	}
	return out
}

// validates says whether kernel.Load accepts the table at path.
func validates(t *testing.T, path string) (bool, string) {
	t.Helper()
	self, _ := os.Executable()
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), envFake+"=validate", kernel.BigmTableEnv+"="+path, kernel.FatbinEnv+"=")
	out, err := cmd.CombinedOutput()
	return err == nil, string(out)
}

// The script picks, per (shard, MT), the fastest config among those never
// wrong there, writes it in bigm_table.tsv's format with its median, a
// table kernel.Load accepts, and records every run.
func TestSweepPicks(t *testing.T) {
	seed := rand.Uint64()
	order := map[int][]string{
		896: {"tc/8/4/8", "tc/8/4/8/np", "tc/4/2/8", "tc/4/4/4", "tc/8/8/4", "tc/8/2/8"},
		448: {"tc/4/4/8", "tc/8/8/8", "tc/4/2/8", "tc/2/2/8"},
	}
	configs := "896=" + strings.Join(order[896], ",") + ";448=" + strings.Join(order[448], ",")
	dir, code, rows := sweep(t, seed, nil, "--hidden", "896,448", "--rounds", "3", "--configs", configs)
	picks := want(rows, order)
	wantCode := 0
	if len(picks) < 8 {
		wantCode = 1
	}
	if code != wantCode {
		t.Fatalf("exit %d with %d of 8 (shard, MT) picked, want %d", code, len(picks), wantCode)
	}
	table := filepath.Join(dir, "out", "bigm_table.tsv")
	got := map[key][]string{}
	for _, f := range readTSV(t, table, kernel.BigmTableHeader) {
		shard, _ := strconv.Atoi(f[1])
		mt, _ := strconv.Atoi(f[2])
		got[key{shard, mt}] = f
	}
	for _, shard := range []int{896, 448} {
		for _, mt := range kernel.BigmCodes {
			k := key{shard, mt}
			f, ok := got[k]
			if !ok {
				t.Errorf("shard %d mt %d: no row in the table", shard, mt)
				continue
			}
			c, ok := picks[k]
			if !ok {
				if f[8] != "-" {
					t.Errorf("shard %d mt %d: nothing correct ran, yet median %s", shard, mt, f[8])
				}
				continue
			}
			cfg := strings.Join(f[3:7], "/")
			if f[7] == "0" {
				cfg += "/np"
			} else if f[7] != "16777216" {
				t.Errorf("shard %d mt %d: l2_prefetch %s", shard, mt, f[7])
			}
			var v []float64
			for _, r := range rows {
				if !r.Final && r.Shard == shard && r.M == mt && r.Config == c {
					v = append(v, r.Median)
				}
			}
			if cfg != c || f[8] != fmt.Sprintf("%.3f", median(v)) {
				t.Errorf("shard %d mt %d: picked %s at %s µs, want %s at %.3f", shard, mt, cfg, f[8], c, median(v))
			}
		}
	}
	if ok, out := validates(t, table); !ok {
		t.Errorf("kernel.Load refuses the picked table: %s", out)
	}
	// Every run is recorded; the illegal ones are exactly those
	// kernel.Load refuses as a one-row table.
	runs := readTSV(t, filepath.Join(dir, "out", "bigm-sweep.tsv"),
		"round\tshard\tmt\tconfig\tstatus\tmedian_us\tp90_us\tfloor_us\twrong\tidentical\tseconds\tnote")
	var nrun int
	for _, r := range rows {
		if !r.Final {
			nrun++
		}
	}
	var recorded, illegal int
	for _, f := range runs {
		switch f[4] {
		case "ok", "wrong":
			recorded++
		case "illegal":
			illegal++
		case "refused":
			t.Errorf("run refused though the script found it legal: %v", f)
		}
	}
	if recorded != nrun {
		t.Errorf("bigm-sweep.tsv has %d measured rows, the fake reported %d", recorded, nrun)
	}
	// tc/8/8/4 and tc/8/8/8: K split 8 times depth 2 exceeds MT 128's 8-chunk window.
	if illegal != 2 {
		t.Errorf("%d illegal rows, want 2 (ksplit 8 at MT 128)", illegal)
	}
	for _, c := range append(order[896], order[448]...) {
		for _, mt := range kernel.BigmCodes {
			isIllegal := slices.ContainsFunc(runs, func(f []string) bool { return f[3] == c && f[2] == strconv.Itoa(mt) && f[4] == "illegal" })
			p := strings.Split(c, "/")
			pf := "16777216"
			if len(p) == 5 {
				pf = "0"
			}
			path := filepath.Join(t.TempDir(), "one.tsv")
			row := strings.Join([]string{"3584", "896", strconv.Itoa(mt), p[0], p[1], p[2], p[3], pf, "-"}, "\t")
			if err := os.WriteFile(path, []byte(kernel.BigmTableHeader+"\n"+row+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if ok, out := validates(t, path); ok == isIllegal {
				t.Errorf("%s at MT %d: the script says illegal %v, kernel.Load says %q", c, mt, isIllegal, out)
			}
		}
	}
	// The report compares the picked table with the fake PyTorch.
	rep, err := os.ReadFile(filepath.Join(dir, "report.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if !r.Final {
			continue
		}
		// The fake PyTorch writes three decimals; the report rounds that.
		tor, _ := strconv.ParseFloat(fmt.Sprintf("%.3f", torchUS(seed, r.Shard, r.M)), 64)
		line := fmt.Sprintf("%.2f %10.2f", r.Median, tor)
		if !strings.Contains(string(rep), line) {
			t.Errorf("report lacks the row of shard %d M %d (%q):\n%s", r.Shard, r.M, line, rep)
		}
	}
}

// A config tprun refuses is recorded as refused at every MT it tried and
// never picked; the other configs still run.
func TestSweepRecordsRefusal(t *testing.T) {
	seed := rand.Uint64()
	dir, _, rows := sweep(t, seed, map[string]string{envRefuse: "tc/4/4/4"},
		"--hidden", "448", "--rounds", "1", "--configs", "448=tc/4/4/4,tc/4/4/8")
	runs := readTSV(t, filepath.Join(dir, "out", "bigm-sweep.tsv"),
		"round\tshard\tmt\tconfig\tstatus\tmedian_us\tp90_us\tfloor_us\twrong\tidentical\tseconds\tnote")
	refused := 0
	for _, f := range runs {
		if f[3] == "tc/4/4/4" {
			if f[4] != "refused" || !strings.Contains(f[11], "larger-M table") {
				t.Errorf("refused config recorded as %v", f)
			}
			refused++
		}
	}
	if refused != 4 {
		t.Errorf("%d refused rows, want 4", refused)
	}
	for _, f := range readTSV(t, filepath.Join(dir, "out", "bigm_table.tsv"), kernel.BigmTableHeader) {
		// A "-" row is the committed seed, kept where nothing correct ran.
		if f[1] == "448" && strings.Join(f[3:7], "/") == "tc/4/4/4" && f[8] != "-" {
			t.Errorf("the refused config was picked: %v", f)
		}
	}
	if len(rows) == 0 {
		t.Error("the other config never ran")
	}
}

// --dry-run prints the plan and runs nothing: no tprun, no PyTorch, and no
// file or folder written (the output, the work folder, the report).
func TestSweepDryRun(t *testing.T) {
	dir, code, rows := sweep(t, rand.Uint64(), nil, "--hidden", "896,448", "--dry-run")
	if code != 0 || len(rows) != 0 {
		t.Fatalf("exit %d, %d runs of the fakes: want 0 and none", code, len(rows))
	}
	for _, name := range []string{"out", "work", "report.txt", "fake.jsonl"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("%s: a dry run wrote it (%v)", name, err)
		}
	}
}
