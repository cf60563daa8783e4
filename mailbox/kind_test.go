package mailbox

import (
	"errors"
	"strings"
	"testing"
)

func TestParseKind(t *testing.T) {
	cases := []struct {
		desc, in string
		want     Kind
		wantErr  bool
	}{
		{"auto", "auto", KindAuto, false},
		{"empty means auto", "", KindAuto, false},
		{"multicast", "multicast", KindMulticast, false},
		{"unicast", "unicast", KindUnicast, false},
		{"host", "host", KindHost, false},
		{"case and space ignored", "  Unicast ", KindUnicast, false},
		{"cpu is not a mailbox kind", "cpu", KindAuto, true},
		{"typo", "multicats", KindAuto, true},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			got, err := ParseKind(tc.in)
			if tc.wantErr {
				if !errors.Is(err, ErrUnknownKind) || !strings.Contains(err.Error(), tc.in) {
					t.Fatalf("ParseKind(%q) = %v, %v; want ErrUnknownKind naming the input", tc.in, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseKind(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
			if back, err := ParseKind(got.String()); err != nil || back != got {
				t.Errorf("%v does not round-trip through String: %v, %v", got, back, err)
			}
		})
	}
	if s := Kind(42).String(); s != "Kind(42)" {
		t.Errorf("Kind(42).String() = %q", s)
	}
}

func TestMulticastBlockedBy(t *testing.T) {
	cases := []struct {
		desc    string
		env     map[string]string
		wantVar string // "" means not blocked
	}{
		{"nothing set", nil, ""},
		{"NCCL_NVLS_ENABLE=0", map[string]string{"NCCL_NVLS_ENABLE": "0"}, "NCCL_NVLS_ENABLE"},
		{"NCCL_NVLS_ENABLE=1 allows", map[string]string{"NCCL_NVLS_ENABLE": "1"}, ""},
		{"NCCL_NVLS_ENABLE=00 is zero", map[string]string{"NCCL_NVLS_ENABLE": "00"}, "NCCL_NVLS_ENABLE"},
		{"NCCL_NVLS_ENABLE=false", map[string]string{"NCCL_NVLS_ENABLE": "false"}, "NCCL_NVLS_ENABLE"},
		{"NCCL_NVLS_ENABLE empty allows", map[string]string{"NCCL_NVLS_ENABLE": ""}, ""},
		{"NCCL_NVLS_ENABLE garbage is not a switch", map[string]string{"NCCL_NVLS_ENABLE": "maybe"}, ""},
		{"TORCH_SYMM_MEM_DISABLE_MULTICAST=1", map[string]string{"TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}, "TORCH_SYMM_MEM_DISABLE_MULTICAST"},
		{"TORCH_SYMM_MEM_DISABLE_MULTICAST=true", map[string]string{"TORCH_SYMM_MEM_DISABLE_MULTICAST": "TRUE"}, "TORCH_SYMM_MEM_DISABLE_MULTICAST"},
		{"TORCH_SYMM_MEM_DISABLE_MULTICAST=0 allows", map[string]string{"TORCH_SYMM_MEM_DISABLE_MULTICAST": "0"}, ""},
		{"NVSHMEM_DISABLE_NVLS=1", map[string]string{"NVSHMEM_DISABLE_NVLS": "1"}, "NVSHMEM_DISABLE_NVLS"},
		{"NVSHMEM_DISABLE_NVLS=yes", map[string]string{"NVSHMEM_DISABLE_NVLS": "yes"}, "NVSHMEM_DISABLE_NVLS"},
		{"NVSHMEM_DISABLE_NVLS=0 allows", map[string]string{"NVSHMEM_DISABLE_NVLS": "0"}, ""},
		{"TPRUN_MULTICAST=0", map[string]string{"TPRUN_MULTICAST": "0"}, "TPRUN_MULTICAST"},
		{"TPRUN_MULTICAST= 0 with spaces", map[string]string{"TPRUN_MULTICAST": " 0 "}, "TPRUN_MULTICAST"},
		{"TPRUN_MULTICAST=off", map[string]string{"TPRUN_MULTICAST": "off"}, "TPRUN_MULTICAST"},
		{"TPRUN_MULTICAST=1 allows", map[string]string{"TPRUN_MULTICAST": "1"}, ""},
		{"every allowing value at once", map[string]string{"NCCL_NVLS_ENABLE": "1", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "0", "NVSHMEM_DISABLE_NVLS": "0", "TPRUN_MULTICAST": "1"}, ""},
		{"several blockers: the first in rule order is named",
			map[string]string{"TPRUN_MULTICAST": "0", "NVSHMEM_DISABLE_NVLS": "1"}, "NVSHMEM_DISABLE_NVLS"},
		{"an unrelated variable", map[string]string{"NCCL_P2P_DISABLE": "1"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			getenv := func(k string) string { return tc.env[k] }
			name, blocked := MulticastBlockedBy(getenv)
			if name != tc.wantVar || blocked != (tc.wantVar != "") {
				t.Fatalf("MulticastBlockedBy = %q, %v; want %q", name, blocked, tc.wantVar)
			}
			err := CheckMulticastAllowed(getenv)
			if tc.wantVar == "" {
				if err != nil {
					t.Fatalf("CheckMulticastAllowed = %v, want nil", err)
				}
				return
			}
			var me *MulticastDisabledError
			if !errors.Is(err, ErrMulticastDisabled) || !errors.As(err, &me) || me.Variable != tc.wantVar ||
				!strings.Contains(err.Error(), tc.wantVar+"="+strings.TrimSpace(tc.env[tc.wantVar])) {
				t.Fatalf("CheckMulticastAllowed = %v, want ErrMulticastDisabled naming %s", err, tc.wantVar)
			}
		})
	}
}
