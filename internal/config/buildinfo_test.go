package config

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestBuildInfoFrom(t *testing.T) {
	rev := "0123456789abcdef0123456789abcdef01234567"
	vcs := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "false"}}
	dirty := []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}}
	cases := []struct {
		name    string
		bi      *debug.BuildInfo
		linked  string
		want    BuildInfo
		wantRev string
	}{
		{"no build info", nil, "", BuildInfo{Version: "dev", Revision: "unknown", GoVersion: runtime.Version()}, "unknown"},
		{"checkout build", &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "(devel)"}, Settings: vcs}, "dev",
			BuildInfo{Version: "dev", Revision: rev, GoVersion: "go1.26.1"}, rev},
		{"uncommitted changes", &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "(devel)"}, Settings: dirty}, "",
			BuildInfo{Version: "dev", Revision: rev, Modified: true, GoVersion: "go1.26.1"}, rev + "-modified"},
		{"go install @version", &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "v1.4.0"}}, "dev",
			BuildInfo{Version: "v1.4.0", Revision: "unknown", GoVersion: "go1.26.1"}, "unknown"},
		{"linked version wins", &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "v1.4.0"}, Settings: vcs}, "v1.5.0-rc1",
			BuildInfo{Version: "v1.5.0-rc1", Revision: rev, GoVersion: "go1.26.1"}, rev},
	}
	for _, c := range cases {
		got := BuildInfoFrom(c.bi, c.linked)
		if got != c.want || got.RevisionLabel() != c.wantRev {
			t.Errorf("%s: %+v (%s), want %+v (%s)", c.name, got, got.RevisionLabel(), c.want, c.wantRev)
		}
	}
}
