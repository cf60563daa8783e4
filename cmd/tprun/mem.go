package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// availableMemory is how many bytes this process can still allocate
// without swapping or being killed: MemAvailable of /proc/meminfo, or less
// where a cgroup's memory limit leaves less (a container). False where
// /proc/meminfo cannot be read (then the job is not checked against it).
func availableMemory() (int64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	avail, ok := memAvailable(string(b))
	if !ok {
		return 0, false
	}
	if self, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		if h, ok := cgroupHeadroom("/sys/fs/cgroup", string(self)); ok && h < avail {
			avail = h
		}
	}
	return avail, true
}

// memAvailable reads MemAvailable (kB) from the text of /proc/meminfo.
func memAvailable(meminfo string) (int64, bool) {
	for _, line := range strings.Split(meminfo, "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "MemAvailable:" && f[2] == "kB" {
			if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				return kb * 1024, true
			}
		}
	}
	return 0, false
}

// cgroupHeadroom is how much more memory this process's memory cgroup and
// its ancestors allow: the least of limit minus usage over them, cgroup v2
// (memory.max, memory.current) or v1 (memory.limit_in_bytes,
// memory.usage_in_bytes). root is the cgroup mount (/sys/fs/cgroup) and
// self the text of /proc/self/cgroup. False when no limit applies.
func cgroupHeadroom(root, self string) (int64, bool) {
	best, found := int64(0), false
	consider := func(base, path, maxFile, curFile string) {
		for d := filepath.Join(base, path); ; d = filepath.Dir(d) {
			limit, okL := readBytes(filepath.Join(d, maxFile))
			used, okU := readBytes(filepath.Join(d, curFile))
			// No limit reads as "max" (v2) or a number near 2^63 (v1).
			if okL && okU && limit < 1<<62 {
				if h := max(limit-used, 0); !found || h < best {
					best, found = h, true
				}
			}
			if len(d) <= len(base) {
				return
			}
		}
	}
	for _, line := range strings.Split(self, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			consider(root, parts[2], "memory.max", "memory.current")
		case containsField(parts[1], "memory"):
			consider(filepath.Join(root, "memory"), parts[2], "memory.limit_in_bytes", "memory.usage_in_bytes")
		}
	}
	return best, found
}

func containsField(list, name string) bool {
	for _, f := range strings.Split(list, ",") {
		if f == name {
			return true
		}
	}
	return false
}

// readBytes reads one decimal number from a cgroup file; false for "max"
// or anything else.
func readBytes(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}
