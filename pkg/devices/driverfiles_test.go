package devices_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/devices"
	"github.com/gpufabric/gpufabric/pkg/devices/mock"
)

// TestDriverEdits generates the driver's CDI edits with NVIDIA's nvcdi
// from a mock node's NVML and fake driver installation: every library of
// the driver version and the binaries are mounted read-only from the host
// root, the hooks make libcuda.so.1 and update the ldcache, and a driver
// root seen under another path in the plugin's container is rewritten to
// the host's.
func TestDriverEdits(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, err := mock.LoadFile("mock/fabrics/hgx-h100x8.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.Backend("h100-n01", filepath.Join(t.TempDir(), "n"))
	if err != nil {
		t.Fatal(err)
	}
	const version = "550.54.15" // the DGX H100 mock's
	for _, tc := range []struct{ name, hostRoot string }{{"same root", ""}, {"plugin in a container", "/"}} {
		t.Run(tc.name, func(t *testing.T) {
			edits, err := devices.DriverEdits(ctx, b.NVML(), devices.DriverFilesOptions{
				DriverRoot: b.DriverRoot(), HostDriverRoot: tc.hostRoot, DevRoot: filepath.Dir(b.DevRoot()), HookPath: "/opt/gpufabric/nvidia-cdi-hook",
			})
			if err != nil {
				t.Fatal(err)
			}
			hostRoot := tc.hostRoot
			if hostRoot == "" {
				hostRoot = b.DriverRoot()
			}
			mounts := map[string]string{}
			for _, m := range edits.Mounts {
				mounts[m.ContainerPath] = m.HostPath
				if !slices.Contains(m.Options, "ro") {
					t.Errorf("mount %s is not read-only: %v", m.ContainerPath, m.Options)
				}
			}
			var want []string
			for _, l := range mock.DriverLibraries(version) {
				want = append(want, "/usr/lib/x86_64-linux-gnu/"+l)
			}
			want = append(want, "/usr/bin/nvidia-smi", "/usr/bin/nvidia-imex-ctl", "/lib/firmware/nvidia/"+version+"/gsp_ga10x.bin")
			for _, c := range want {
				if got := mounts[c]; got != filepath.Join(hostRoot, c) {
					t.Errorf("mount %s from %q, want %q", c, got, filepath.Join(hostRoot, c))
				}
			}
			var hooks []string
			for _, h := range edits.Hooks {
				if h.Path != "/opt/gpufabric/nvidia-cdi-hook" {
					t.Errorf("hook path %s", h.Path)
				}
				hooks = append(hooks, strings.Join(h.Args[1:], " "))
			}
			joined := strings.Join(hooks, "\n")
			for _, w := range []string{"create-symlinks --link libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so", "update-ldcache --folder /usr/lib/x86_64-linux-gnu"} {
				if !strings.Contains(joined, w) {
					t.Errorf("hooks lack %q:\n%s", w, joined)
				}
			}
			if !slices.Contains(edits.Env, "NVIDIA_VISIBLE_DEVICES=void") {
				t.Errorf("env %v lacks NVIDIA_VISIBLE_DEVICES=void", edits.Env)
			}
		})
	}
}

// TestDriverEditsWithoutDriver: a driver root without libcuda is an error
// that names the root.
func TestDriverEditsWithoutDriver(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, err := mock.LoadFile("mock/fabrics/hgx-h100x8.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.Backend("h100-n01", filepath.Join(t.TempDir(), "n"))
	if err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	_, err = devices.DriverEdits(ctx, b.NVML(), devices.DriverFilesOptions{DriverRoot: empty, DevRoot: "/", HookPath: "/usr/bin/nvidia-cdi-hook"})
	if err == nil || !strings.Contains(err.Error(), empty) {
		t.Fatalf("error = %v, want one naming %s", err, empty)
	}
}

// BenchmarkDriverEdits is the cost of one nvcdi generation on a mock node
// (the plugin caches it per driver version, so a prepare does not pay it).
func BenchmarkDriverEdits(b *testing.B) {
	f, err := mock.LoadFile("mock/fabrics/hgx-h100x8.yaml")
	if err != nil {
		b.Fatal(err)
	}
	be, err := f.Backend("h100-n01", filepath.Join(b.TempDir(), "n"))
	if err != nil {
		b.Fatal(err)
	}
	ctx := klog.NewContext(b.Context(), logr.Discard())
	opts := devices.DriverFilesOptions{DriverRoot: be.DriverRoot(), HostDriverRoot: "/", DevRoot: filepath.Dir(be.DevRoot()), HookPath: "/usr/bin/nvidia-cdi-hook"}
	for b.Loop() {
		if _, err := devices.DriverEdits(ctx, be.NVML(), opts); err != nil {
			b.Fatal(err)
		}
	}
}
