package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// TestBuildHeartbeat: while a control-plane build runs (minutes, the first
// time `make demo` runs), hack/build-control-plane.sh says so every
// HEARTBEAT_SECONDS ("still building kube-apiserver, 3m30s"), and a failed
// build still fails.
func TestBuildHeartbeat(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	run := func(cmd string) (string, error) {
		sh := exec.CommandContext(t.Context(), "bash", "-c", `source hack/lib/heartbeat.sh && `+cmd)
		sh.Dir = root
		sh.Env = append(os.Environ(), "HEARTBEAT_SECONDS=1", "HEARTBEAT_PREFIX=build-control-plane")
		var stderr bytes.Buffer
		sh.Stderr = &stderr
		err := sh.Run()
		return stderr.String(), err
	}
	out, err := run(`with_heartbeat "building kube-apiserver" sleep 3.5`)
	beat := regexp.MustCompile(`^\[build-control-plane \d\d:\d\d:\d\d\] still building kube-apiserver, 0m0[1-4]s$`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(lines) < 2 || !slices.ContainsFunc(lines, beat.MatchString) || slices.ContainsFunc(lines, func(l string) bool { return !beat.MatchString(l) }) {
		t.Errorf("a 3.5 s build with a beat a second: %v, %q", err, out)
	}
	if out, err := run(`with_heartbeat "building kwok" false`); err == nil || out != "" {
		t.Errorf("a failed quick build: %v, %q; want its failure and no beat", err, out)
	}
	script, err := os.ReadFile(filepath.Join(root, "hack/build-control-plane.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(script), `with_heartbeat "building $name"`) {
		t.Error("hack/build-control-plane.sh builds without a heartbeat")
	}
}
