package main

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// versionLine is what `tprun --version` prints: the module version (a
// release tag, or the pseudo-version Go stamps from the commit, +dirty for
// uncommitted changes), else the commit the build info names, and the Go
// version and platform it was built with.
func versionLine() string {
	bi, ok := debug.ReadBuildInfo()
	return formatVersion(bi, ok)
}

func formatVersion(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "tprun (no build information) " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	rev := settings["vcs.revision"]
	if len(rev) > 12 {
		rev = rev[:12]
	}
	// A pseudo-version holds the commit already.
	if rev != "" && !strings.Contains(v, rev) {
		v += " " + rev
		if settings["vcs.modified"] == "true" {
			v += "+dirty"
		}
	}
	goos, goarch := settings["GOOS"], settings["GOARCH"]
	if goos == "" || goarch == "" {
		goos, goarch = runtime.GOOS, runtime.GOARCH
	}
	goVersion := bi.GoVersion
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	return "tprun " + v + " " + goVersion + " " + goos + "/" + goarch
}
