package topo

// Schema names the layout of the JSON report; it changes only when a field
// changes meaning or disappears (new fields may be added).
const Schema = "tprun-topo/1"

// Mailbox backends, as `--mailbox` spells them.
const (
	BackendAuto      = "auto"
	BackendMulticast = "multicast"
	BackendUnicast   = "unicast"
)

// Options says which devices a job will use and how strictly to judge them.
type Options struct {
	// TP is the number of ranks. 0 means "check the selected devices as
	// they are" (`tprun topo`): one rank per device, no count requirement.
	TP int
	// Devices are the CUDA ordinals the ranks use, rank r on Devices[r];
	// only the first TP entries count when TP > 0. Nil means 0..TP-1, or
	// every GPU CUDA sees when TP is 0.
	Devices []int
	// Mailbox is the backend the user asked for: "", "auto", "multicast"
	// or "unicast". Anything but auto makes the check confirm that backend
	// or refuse.
	Mailbox string
	// Strict turns every warning into a reason to refuse.
	Strict bool
	// LookupEnv reads the environment the ranks will see (CUDA numbering,
	// multicast safety variables); nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// IMEXDir is where IMEX channels are looked for; "" means
	// DefaultIMEXDir.
	IMEXDir string
}

// Report is everything the check found and what it concluded. Its JSON form
// is what `tprun topo --json` prints; slices are never null there.
type Report struct {
	Schema            string `json:"schema"`
	DriverVersion     string `json:"driver_version"`      // "" when NVML did not say
	CUDADriverVersion string `json:"cuda_driver_version"` // "13.0"; "" when NVML did not say
	TP                int    `json:"tp"`                  // as given; 0 for `tprun topo`
	NVMLDevices       int    `json:"nvml_devices"`        // GPUs NVML sees on the node
	CUDA              CUDA   `json:"cuda"`
	// Ranks holds the CUDA ordinal each rank uses, rank order.
	Ranks []int `json:"ranks"`
	// Devices are the distinct devices in Ranks, by CUDA ordinal.
	Devices []Device `json:"devices"`
	// Pairs are every pair of Devices, (a, b) with a < b.
	Pairs    []Pair   `json:"pairs"`
	Warnings []string `json:"warnings"`
	Verdict  Verdict  `json:"verdict"`
	// CrossNode says whether these GPUs can join a job across nodes.
	CrossNode CrossNode `json:"cross_node"`
}

// CUDA records how NVML devices were matched to CUDA ordinals.
type CUDA struct {
	VisibleDevices *string `json:"visible_devices"` // null when unset
	DeviceOrder    string  `json:"device_order"`    // as set; "" means FASTEST_FIRST
	// NVMLIndex[ordinal] is the NVML index of each device CUDA sees.
	NVMLIndex []int `json:"nvml_index"`
}

// Device is one GPU the job uses.
type Device struct {
	CUDAOrdinal       int    `json:"cuda_ordinal"`
	NVMLIndex         int    `json:"nvml_index"`
	Ranks             int    `json:"ranks"` // ranks that will run on it
	UUID              string `json:"uuid"`
	Name              string `json:"name"`
	ComputeCapability string `json:"compute_capability"` // "9.0"; "" not reported
	PCIBusID          string `json:"pci_bus_id"`
	// MIG: "disabled", "enabled", "disabled, enabled after reset",
	// "enabled, disabled after reset", "not supported", "not reported".
	MIG string `json:"mig"`
	// ComputeMode: "default", "exclusive-process", "exclusive-thread",
	// "prohibited", "not reported".
	ComputeMode string `json:"compute_mode"`
	NVLink      NVLink `json:"nvlink"`
	Fabric      Fabric `json:"fabric"`

	ccMajor, ccMinor int // -1 when not reported
	migEnabled       bool
	migPending       bool // MIG will be enabled at the next reset
	computeMode      int  // nvml.ComputeMode, -1 when not reported
	fabricCompleted  bool // state completed and probe status SUCCESS
}

// NVLink summarizes one device's NVLink links.
type NVLink struct {
	// Status: "reported", "none" (the GPU has no NVLink), "not reported".
	Status   string `json:"status"`
	Active   int    `json:"active"`
	Inactive int    `json:"inactive"`
	// ToNVSwitch counts active links whose far end is an NVSwitch.
	ToNVSwitch int    `json:"to_nvswitch"`
	Links      []Link `json:"links"`
}

// Link is one NVLink of a device.
type Link struct {
	Link   int  `json:"link"`
	Active bool `json:"active"`
	// Version is NVML's nvmlNvlinkVersion_t value (0 when not reported);
	// VersionName decodes it ("4.0").
	Version     uint32 `json:"version"`
	VersionName string `json:"version_name"`
	// Remote: "gpu", "nvswitch", "other" or "unknown"; RemotePCIBusID as
	// NVML reports the far end ("" for inactive links or when not reported).
	Remote         string `json:"remote"`
	RemotePCIBusID string `json:"remote_pci_bus_id"`
}

// Fabric is a device's GPU fabric (NVSwitch fabric manager) registration.
type Fabric struct {
	// State: "completed", "in progress", "not started", "not supported",
	// "not reported" (NVML has no fabric info for this GPU).
	State       string `json:"state"`
	Status      string `json:"status"` // NVML's result of the registration; "" unless completed
	Clique      uint32 `json:"clique"`
	ClusterUUID string `json:"cluster_uuid"`
}

// Pair is what connects two of the devices, a < b by CUDA ordinal.
type Pair struct {
	A int `json:"a"`
	B int `json:"b"`
	// P2P status in both directions; OK only when both are.
	Read   P2P `json:"p2p_read"`
	Write  P2P `json:"p2p_write"`
	NVLink P2P `json:"p2p_nvlink"`
	// NVLinks counts the links that join the pair, directly or through
	// NVSwitches (0 when none or unknown).
	NVLinks int `json:"nvlinks"`
	// Path says in words what joins them: "NVLink", else the PCIe common
	// ancestor ("a single PCIe switch", …).
	Path string `json:"path"`
	// PCIe is the PCIe common ancestor in words, "not reported" when NVML
	// did not say.
	PCIe string `json:"pcie"`
	// Cell is the matrix entry: NV18, NV, PIX, PXB, PHB, NODE, SYS, BRD, ?.
	Cell string `json:"cell"`
}

// P2P is one peer-to-peer capability of a pair.
type P2P struct {
	OK       bool   `json:"ok"`
	Reported bool   `json:"reported"` // false: NVML could not say, in at least one direction
	Status   string `json:"status"`   // "ok", or what NVML said, naming the direction

	denied bool // NVML said no in at least one direction (not just "cannot say")
}

// Verdict is the conclusion.
type Verdict struct {
	OK        bool   `json:"ok"`
	Requested string `json:"requested"` // the --mailbox value, "auto" by default
	Backend   string `json:"backend"`   // "multicast", "unicast", "" when refused
	Reason    string `json:"reason"`    // one sentence: why this backend, or why refused
	// MulticastBlockers says why multicast was not chosen, one reason each.
	MulticastBlockers []string `json:"multicast_blockers"`
	// SafetyVariable is the variable that forbids multicast, "NAME=value",
	// or "".
	SafetyVariable string `json:"safety_variable"`
	// Problems are the reasons for refusing; empty when OK.
	Problems []string `json:"problems"`
}
