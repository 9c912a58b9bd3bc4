package version

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestResolve(t *testing.T) {
	vcs := func(rev, modified string) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}}
	}
	for _, tc := range []struct {
		name                string
		version, commit     string
		bi                  *debug.BuildInfo
		wantVersion, wantID string
	}{
		{name: "ldflags win", version: "v0.2.0", commit: "abc", bi: vcs("def", "true"), wantVersion: "v0.2.0", wantID: "abc"},
		{name: "vcs stamp", bi: vcs("def", "false"), wantVersion: Devel, wantID: "def"},
		{name: "dirty tree", bi: vcs("def", "true"), wantVersion: Devel, wantID: "def-dirty"},
		{name: "go install module@version", bi: &debug.BuildInfo{Main: debug.Module{Version: "v0.3.1"}}, wantVersion: "v0.3.1", wantID: Unknown},
		{name: "nothing known", wantVersion: Devel, wantID: Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := resolve(tc.version, tc.commit, tc.bi)
			if got.Version != tc.wantVersion || got.Commit != tc.wantID || !strings.HasPrefix(got.GoVersion, "go") || !strings.Contains(got.Platform, "/") {
				t.Errorf("resolve = %+v, want version %s commit %s", got, tc.wantVersion, tc.wantID)
			}
		})
	}
}

func TestLine(t *testing.T) {
	i := Info{Version: "v1.0.0", Commit: "abc", GoVersion: "go1.26.8", Platform: "linux/amd64"}
	if got, want := i.Line("gpufabric-scheduler"), "gpufabric-scheduler v1.0.0 (commit abc, go1.26.8, linux/amd64)\n"; got != want {
		t.Errorf("Line = %q, want %q", got, want)
	}
}

func TestIsVersionFlag(t *testing.T) {
	for arg, want := range map[string]bool{
		"--version": true, "-version": true, "--version=true": true,
		"--version=false": false, "version": false, "--versions": false, "--v=2": false,
	} {
		if got := IsVersionFlag(arg); got != want {
			t.Errorf("IsVersionFlag(%q) = %t, want %t", arg, got, want)
		}
	}
}

func TestRegister(t *testing.T) {
	reg := prometheus.NewRegistry()
	i := Info{Version: "v1.0.0", Commit: "abc", GoVersion: "go1.26.8"}
	if err := Register(reg, "kubelet_plugin", i); err != nil {
		t.Fatal(err)
	}
	want := `# HELP gpufabric_kubelet_plugin_build_info Always 1; its labels say which build runs: version, commit and the Go version that built it.
# TYPE gpufabric_kubelet_plugin_build_info gauge
gpufabric_kubelet_plugin_build_info{commit="abc",go_version="go1.26.8",version="v1.0.0"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if err := Register(reg, "kubelet-plugin", i); err == nil {
		t.Error("a component name with a dash was accepted")
	}
}
