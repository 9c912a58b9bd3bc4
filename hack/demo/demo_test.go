package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// TestDemo runs `make demo`'s program end to end on the embedded control
// plane and checks the report says what the demo promises: the training
// gang whole in one NVLink domain, its shared claim reserved for the
// PodGroup, the segmented gang over two NVLink domains with its segments
// named, the impossible gang refused with numbers, the disaggregated
// inference tree (a CompositePodGroup) whole with prefill and decode on one
// set of IB rails, and the CDI devices a kubelet gets for a bound pod;
// beside them a JobSet and a LeaderWorkerSet (the real controllers), each
// placed as a gang gpufabric-grouper made.
func TestDemo(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := buildDemoBinaries(t, root)
	var out bytes.Buffer
	err = run(t.Context(), options{
		fabric:      filepath.Join(root, "examples", "fabric.yaml"),
		examples:    filepath.Join(root, "examples"),
		workloads:   filepath.Join(root, "examples", "workloads"),
		controllers: "on",
		binDir:      bin,
		timeout:     3 * time.Minute,
	}, &out)
	if err != nil {
		t.Fatalf("demo failed: %v\noutput:\n%s", err, out.String())
	}
	for _, want := range []string{
		"job llm-train: 16/16 pods bound, in 1 NVLink domain(s)",
		"→ PodGroup llm-train-",
		"too-big: 0/20 pods bound",
		"train-seg: 18/18 pods bound, in 1 NVLink domain(s)",
		"; segments in gpufabric.dev/nvlinkDomain: ",
		"too-big: PodGroupInitiallyScheduled=False (Unschedulable)",
		"needs 20 pods with 80 gpu.gpufabric.dev devices in one gpufabric.dev/nvlinkDomain: largest free 72 devices",
		"env GPUFABRIC_GPU_UUIDS=GPU-",
		"driver: 13 files mounted (libraries, binaries, firmware), hooks create-symlinks",
		"env NCCL_MNNVL_ENABLE=1",
		"serve-frontend: 1/1 pods bound",
		"serve-prefill: 2/2 pods bound",
		"serve-decode: 2/2 pods bound",
		"jobset.eval.workers: 2/2 pods bound, in 1 NVLink domain(s)",
		"lws.chat.0: 2/2 pods bound, in 1 NVLink domain(s)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	// On HGX H100 (8 rails; the GB200 racks are full) each pod takes 4 of
	// a node's 8 GPUs: every pod of both roles on the same 4 rails.
	if prefill, decode := coupledRails(out.String()); prefill == "" || prefill != decode || strings.Count(prefill, ",") != 3 {
		t.Errorf("prefill on IB rails %q, decode on %q: want one set of 4 rails", prefill, decode)
	}
	if t.Failed() {
		t.Logf("demo output:\n%s", out.String())
	}
}

func TestDemoRejectsBadFabric(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("nodeGroups:\n- name: n%02d\n  count: 2\n  gpus: {model: X100}\n  nvlink: {kind: nvswitch}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := run(t.Context(), options{fabric: bad, timeout: time.Second}, &out)
	if err == nil || !strings.Contains(err.Error(), "bad.yaml") || !strings.Contains(err.Error(), `unknown GPU model "X100"`) {
		t.Errorf("bad fabric: err = %v, want one naming the file and the model", err)
	}
	if out.Len() != 0 {
		t.Errorf("bad fabric started something:\n%s", out.String())
	}
}

// TestDemoOnEveryFixture runs the demo on each fixture fabric of
// pkg/devices/mock: it finishes with a report in which every gang is either
// placed or refused with a reason (an HGX fabric cannot hold the 64-GPU
// training gang in one NVLink domain; it says so and what would help), and
// the disaggregated inference tree, when placed, has its coupled roles on
// one set of IB rails.
func TestDemoOnEveryFixture(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	fixtures, err := filepath.Glob(filepath.Join(root, "pkg", "devices", "mock", "fabrics", "*.yaml"))
	if err != nil || len(fixtures) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	bin := buildDemoBinaries(t, root)
	for _, f := range fixtures {
		t.Run(filepath.Base(f), func(t *testing.T) {
			var out bytes.Buffer
			err := run(t.Context(), options{fabric: f, examples: filepath.Join(root, "examples"), controllers: "off", binDir: bin, timeout: 3 * time.Minute}, &out)
			if err != nil {
				t.Fatalf("demo failed: %v\noutput:\n%s", err, out.String())
			}
			report := out.String()
			if !strings.Contains(report, "Demo finished") {
				t.Errorf("no report")
			}
			if strings.Contains(report, "PodGroupInitiallyScheduled=False") && !strings.Contains(report, "To place the gang:") {
				t.Errorf("a refused gang without an explanation")
			}
			if strings.Contains(report, "serve-prefill: 2/2 pods bound") {
				if prefill, decode := coupledRails(report); prefill == "" || prefill != decode {
					t.Errorf("coupled roles placed with prefill on IB rails %q, decode on %q", prefill, decode)
				}
			}
			if t.Failed() {
				t.Logf("demo output:\n%s", report)
			}
		})
	}
}

func buildDemoBinaries(t *testing.T, root string) string {
	t.Helper()
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+"/", "./cmd/kubelet-plugin", "./cmd/scheduler", "./cmd/grouper")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_CFLAGS=-Wno-deprecated-declarations")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build binaries: %v\n%s", err, out)
	}
	return bin
}

var railsLine = regexp.MustCompile(`(?m)^  (serve-prefill|serve-decode): (\{[0-9,]+\})$`)

// coupledRails returns the one IB rail set the report gives the prefill
// and the decode role's pods ("" when a role's pods use several).
func coupledRails(report string) (prefill, decode string) {
	for _, m := range railsLine.FindAllStringSubmatch(report, -1) {
		if m[1] == "serve-prefill" {
			prefill = m[2]
		} else {
			decode = m[2]
		}
	}
	return prefill, decode
}
