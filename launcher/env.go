package launcher

import (
	"strconv"
	"strings"
)

// rankEnv returns base without the launcher's keys, plus this rank's values.
// The job is single-node, so the local rank is the rank. CUDA_VISIBLE_DEVICES
// is left as inherited: every rank sees every GPU and picks its own from
// TPRUN_DEVICES or its local rank.
func rankEnv(base []string, rank, worldSize int, hubPath, token string, devices []string) []string {
	env := make([]string, 0, len(base)+10)
	for _, kv := range base {
		if !ownedKey(kv) {
			env = append(env, kv)
		}
	}
	r, n := strconv.Itoa(rank), strconv.Itoa(worldSize)
	env = append(env,
		"TPRUN_RANK="+r,
		"TPRUN_WORLD_SIZE="+n,
		"TPRUN_LOCAL_RANK="+r,
		"TPRUN_HUB="+hubPath,
		"TPRUN_JOB_TOKEN="+token,
		"RANK="+r,
		"WORLD_SIZE="+n,
		"LOCAL_RANK="+r,
		"LOCAL_WORLD_SIZE="+n,
	)
	if len(devices) > 0 {
		env = append(env, "TPRUN_DEVICES="+strings.Join(devices[:worldSize], ","))
	}
	return env
}

// ownedKey reports whether kv sets one of the variables the launcher owns;
// inherited values are dropped so a rank never sees a stale one from an
// outer launcher.
func ownedKey(kv string) bool {
	k, _, _ := strings.Cut(kv, "=")
	switch k {
	case "TPRUN_RANK", "TPRUN_WORLD_SIZE", "TPRUN_LOCAL_RANK", "TPRUN_HUB",
		"TPRUN_JOB_TOKEN", "TPRUN_DEVICES",
		"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE":
		return true
	}
	return false
}
