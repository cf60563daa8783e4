// Package bigmsweep holds the CPU tests of scripts/bigm-sweep, the larger-M
// launch table's sweep: the script runs against a fake tprun bench (this
// test binary, which validates each table with the kernel package's own
// loader) and a fake PyTorch baseline, and its picks are checked against
// the fastest correct config computed here from what the fake reported.
package bigmsweep
