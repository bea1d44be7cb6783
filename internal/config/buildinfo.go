package config

import (
	"cmp"
	"runtime"
	"runtime/debug"
)

// BuildInfo says which build of evs is running: the version and the source
// revision it was built from, read from what the Go toolchain records in
// the binary (runtime/debug.ReadBuildInfo), so `evs version` and
// evs_build_info need no build script to be right.
type BuildInfo struct {
	// Version is the release (-ldflags "-X main.version=v1.2.3", or the
	// module version of `go install ...@v1.2.3`), else "dev".
	Version string
	// Revision is the VCS commit the binary was built from, "unknown"
	// when the build recorded none (built outside a checkout, or with
	// -buildvcs=false).
	Revision string
	// Modified says the checkout had changes not committed at Revision.
	Modified bool
	// GoVersion is the toolchain that built it.
	GoVersion string
}

// ReadBuildInfo returns the running binary's BuildInfo; version is the one
// set at link time, "" or "dev" when none was.
func ReadBuildInfo(version string) BuildInfo {
	bi, _ := debug.ReadBuildInfo() // nil when the binary has none
	return BuildInfoFrom(bi, version)
}

// BuildInfoFrom is ReadBuildInfo for the build information bi (nil when
// the binary has none).
func BuildInfoFrom(bi *debug.BuildInfo, version string) BuildInfo {
	in := BuildInfo{Version: version, Revision: "unknown", GoVersion: runtime.Version()}
	if bi == nil {
		in.Version = cmp.Or(in.Version, "dev")
		return in
	}
	in.GoVersion = cmp.Or(bi.GoVersion, in.GoVersion)
	if in.Version == "" || in.Version == "dev" {
		in.Version = "dev"
		// "(devel)" is what a build from a checkout records.
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			in.Version = v
		}
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// RevisionLabel is the revision with "-modified" after it when the
// checkout had uncommitted changes: one value for a metric label.
func (in BuildInfo) RevisionLabel() string {
	if in.Modified {
		return in.Revision + "-modified"
	}
	return in.Revision
}
