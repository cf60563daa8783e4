module github.com/tprun/tprun

go 1.26.8

require (
	github.com/NVIDIA/go-nvml v0.13.4-1
	golang.org/x/sys v0.50.0
)
