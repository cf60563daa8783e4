package main

import (
	"flag"
	"fmt"
	"slices"

	"github.com/tprun/tprun/cmd/tprun/internal/job"
)

// The help pages. docs/cli.md says the same at more length; a test checks
// that every flag of a page is in it.

// jobExits are the exit statuses of a job tprun runs (the default job, a
// command, the benchmark).
var jobExits = [][2]string{
	{"0", "every rank exited 0"},
	{"1-255", "the exit status of the first rank that failed on its own (128+N when signal N killed it); " +
		"for the default job and the benchmark, 1 when a value was wrong or the ranks' blocks differed"},
	{"128+N", "tprun got signal N and stopped the job: 130 SIGINT, 143 SIGTERM, 129 SIGHUP, 131 SIGQUIT"},
	{"141", "tprun's stdout or stderr was closed (tprun ... | head); the job was stopped"},
	{"124", "--timeout ran out; the job was stopped"},
	{"1", "every rank succeeded but some output could not be written (a full disk), or tprun itself failed"},
	{"2", "bad input: a flag, a value, the command; nothing was started"},
	{"3", "the machine refuses the job: the topology check, the multicast safety rule, " +
		"a GPU asked for where there is none, not enough memory; nothing was started"},
}

// userEnv is the environment a user may set, in short; docs/cli.md has
// the whole list.
var userEnv = [][2]string{
	{"TPRUN_CHECK_STEPS=1", "before every step, check that all ranks run the same step with the same M (a hub round trip per step)"},
	{"TPRUN_MULTICAST=0", "never create an NVLink multicast object, as NCCL_NVLS_ENABLE=0, " +
		"TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 also forbid"},
	{"TMPDIR", "where the hub's private socket directory goes"},
}

func mainHelp(fs *flag.FlagSet) *helpPage {
	return &helpPage{
		usage: []string{
			"tprun [--tp N] [flags] [-- CMD ARGS...]",
			"tprun topo [--devices LIST] [--json] [--strict]",
			"tprun bench [--tp N] [flags] [--json]",
			"tprun help [topo|bench]",
			"tprun version",
		},
		about: []string{
			"tprun starts N rank processes on this node and supervises them. Each rank gets " +
				"TPRUN_RANK, TPRUN_WORLD_SIZE, TPRUN_LOCAL_RANK, TPRUN_HUB, TPRUN_JOB_TOKEN, TPRUN_DEVICES " +
				"(with --devices) and the torchrun names RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE; " +
				"its output lines appear prefixed with [rank K]. The first rank that fails stops the others " +
				"(SIGTERM, then SIGKILL after --grace), as do SIGINT, SIGTERM, SIGHUP or SIGQUIT to tprun " +
				"(twice: kill at once) and a closed stdout or stderr.",
			"Without -- CMD, tprun runs its default job: the fused tensor-parallel up-projection, every " +
				"received block checked against a float64 reference and across ranks. Without a GPU it " +
				"runs on the CPU and says so.",
		},
		examples: []example{
			{"tprun --tp 4", "The default job on 4 ranks (on the CPU when there is no GPU)"},
			{"tprun --tp 2 --m 1,8 --iters 1000", "The default job at M 1 and 8 only, 1000 steps each"},
			{"tprun --tp 8 -- ./rank --config c.json", "8 copies of your program, supervised"},
			{"tprun --tp 4 --devices 0,0,1,1 -- ./rank", "Ranks 0 and 1 on GPU 0, ranks 2 and 3 on GPU 1"},
			{"tprun --tp 2 --timeout 10m --log-dir logs -- ./rank", "Stop after 10 minutes; keep each rank's output in logs/rank-K.log"},
			{"tprun topo", "Check the GPUs and say which mailbox --mailbox auto picks"},
			{"tprun bench --tp 2", "Time the fused step per M on GPUs 0 and 1"},
		},
		groups: []flagGroup{
			{title: "Launcher flags", fs: fs, names: launcherFlagNames},
			{title: "Job flags (the default job only)", fs: fs, names: jobFlagNames},
			{title: "Other flags", fs: fs, names: []string{"version"}},
		},
		exits: jobExits,
		env:   userEnv,
		more:  "tprun help topo and tprun help bench describe the subcommands; docs/cli.md in the source tree is the manual.",
	}
}

func topoHelp(fs *flag.FlagSet) *helpPage {
	return &helpPage{
		usage: []string{"tprun topo [--devices LIST] [--json] [--strict]"},
		about: []string{
			"Checks the GPUs through NVML, the way tprun checks them before it starts GPU ranks: " +
				"identity, MIG and compute modes, NVLink, peer access between every pair, the NVSwitch fabric. " +
				"Prints a matrix in the spirit of nvidia-smi topo -m and says which mailbox --mailbox auto " +
				"picks (multicast, unicast) or why the job is refused. It only reads: no CUDA context, no GPU state.",
		},
		examples: []example{
			{"tprun topo", "Check every GPU CUDA sees"},
			{"tprun topo --devices 0-3 --json", "Check GPUs 0 to 3; print a JSON document"},
			{"tprun topo --strict", "Refuse on warnings too (a degraded NVLink)"},
		},
		groups: []flagGroup{{title: "Flags", fs: fs, names: []string{"devices", "json", "strict"}}},
		exits: [][2]string{
			{"0", "the GPUs can run a job; the verdict names the mailbox"},
			{"1", "the check refuses the job, or NVML failed"},
			{"2", "bad input"},
			{"3", "no NVIDIA driver: nothing to check (tprun then runs on the CPU)"},
		},
		more: "With --json, stdout holds one JSON document whatever the outcome; messages go to stderr.",
	}
}

func benchHelp(fs *flag.FlagSet) *helpPage {
	return &helpPage{
		usage: []string{"tprun bench [--tp N] [flags] [--json]"},
		about: []string{
			"Times the fused step on GPUs, per M: the kernel (the skinny one up to M 8, the tensor-core one " +
				"above), the stores of its slice into every rank's mailbox and the receive, chained in CUDA graphs, with the weight shard rotated " +
				"through enough copies that it streams from HBM. Next to it, the HBM floor: the shard's " +
				"weight bytes over the copy bandwidth measured in the same run. One checked replay per M " +
				"compares every block with a float64 reference and across ranks first.",
			"The table gives per M the slowest rank's median and p90 step time over the replays, the floor, " +
				"their ratio, the weight bytes per second, err/tol, #wrong and identical as the default job " +
				"defines them. With --json, stdout holds one JSON document instead (the ranks' own lines go " +
				"to stderr). On a long run rank 0 says on stderr, every few seconds, how far it has come. " +
				"Needs one GPU per rank (ranks may share one with --devices).",
		},
		examples: []example{
			{"tprun bench --tp 2", "The step on GPUs 0 and 1, M 1 to 8"},
			{"tprun bench --tp 1 --m 1,8 --json", "One GPU, M 1 and 8; print a JSON document"},
			{"tprun bench --tp 2 --replays 1000 --json-out step.json", "A longer run: the table on stdout, the JSON document in step.json"},
		},
		groups: []flagGroup{
			{title: "Launcher flags", fs: fs, names: launcherFlagNames},
			{title: "Shape and mailbox", fs: fs, names: job.BenchJobFlags},
			{title: "Benchmark flags", fs: fs, names: append(slices.Clone(job.BenchFlags), "json")},
		},
		exits: jobExits,
		more:  fmt.Sprintf("The JSON document's schema is %s; docs/cli.md describes its fields.", job.BenchSchema),
	}
}
