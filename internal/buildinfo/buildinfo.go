// Package buildinfo says which build of evs is running: the version and
// the source revision it was built from, read from what the Go toolchain
// records in the binary (runtime/debug.ReadBuildInfo), so `evs version`
// and evs_build_info need no build script to be right.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Info identifies a build.
type Info struct {
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

// Read returns the running binary's Info; version is the one set at link
// time, "" or "dev" when none was.
func Read(version string) Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return From(bi, version)
}

// From is Read for the build information bi (nil when the binary has
// none).
func From(bi *debug.BuildInfo, version string) Info {
	in := Info{Version: version, Revision: "unknown", GoVersion: runtime.Version()}
	if bi == nil {
		if in.Version == "" {
			in.Version = "dev"
		}
		return in
	}
	if bi.GoVersion != "" {
		in.GoVersion = bi.GoVersion
	}
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
func (in Info) RevisionLabel() string {
	if in.Modified {
		return in.Revision + "-modified"
	}
	return in.Revision
}
