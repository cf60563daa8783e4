package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCgroupHeadroom: the least of limit minus usage over the process's
// memory cgroup and its ancestors, for cgroup v2 and v1 layouts; none when
// no limit is set.
func TestCgroupHeadroom(t *testing.T) {
	write := func(root, rel, text string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const gib = 1 << 30
	v2 := t.TempDir()
	write(v2, "memory.max", "max\n") // the root of a cgroup namespace: no limit
	write(v2, "memory.current", "5000000000\n")
	write(v2, "job/memory.max", "8589934592\n") // 8 GiB, 3 GiB used: 5 left
	write(v2, "job/memory.current", "3221225472\n")
	write(v2, "job/rank/memory.max", "max\n")
	write(v2, "job/rank/memory.current", "1073741824\n")
	if h, ok := cgroupHeadroom(v2, "0::/job/rank\n"); !ok || h != 5*gib {
		t.Errorf("v2: %d %v, want %d", h, ok, 5*gib)
	}
	if h, ok := cgroupHeadroom(v2, "0::/\n"); ok {
		t.Errorf("v2 without a limit: %d %v", h, ok)
	}
	v1 := t.TempDir()
	write(v1, "memory/memory.limit_in_bytes", "9223372036854771712\n")
	write(v1, "memory/memory.usage_in_bytes", "900000000\n")
	write(v1, "memory/box/memory.limit_in_bytes", "2147483648\n") // 2 GiB, all used and more: 0 left
	write(v1, "memory/box/memory.usage_in_bytes", "2200000000\n")
	self := "9:name=systemd:/\n4:memory:/box\n0::/\n"
	if h, ok := cgroupHeadroom(v1, self); !ok || h != 0 {
		t.Errorf("v1: %d %v, want 0", h, ok)
	}
	if h, ok := cgroupHeadroom(v1, "4:cpu,memory:/\n"); ok {
		t.Errorf("v1 without a limit: %d %v", h, ok)
	}
	if n, ok := memAvailable("MemTotal: 100 kB\nMemAvailable:   24152924 kB\n"); !ok || n != 24152924*1024 {
		t.Errorf("MemAvailable: %d %v", n, ok)
	}
}
