package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/devices"
)

// TestHealthCommand lists and clears the event taints of this boot, as an
// operator does after resetting a GPU.
func TestHealthCommand(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	bootID := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(bootID, []byte("boot-7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	store := devices.NewEventTaints(dir, "boot-7", devices.DefaultHealthPolicy(), false)
	for _, ev := range []devices.Event{
		{UUID: "GPU-a", Kind: devices.EventXID, XID: 79, Time: time.Now()},
		{UUID: "GPU-b", Kind: devices.EventDoubleBitECC, Time: time.Now()},
	} {
		if _, err := store.Record(ev, nil); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := dispatch(ctx, append([]string{"health", "--state-dir", dir, "--boot-id-path", bootID}, args...), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	if code, out, errOut := run("list"); code != 0 || !strings.Contains(out, "GPU-a\tgpufabric.dev/xid=79:NoExecute") || !strings.Contains(out, "GPU-b\tgpufabric.dev/ecc=double-bit:NoExecute") {
		t.Fatalf("list: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, _ := run("--gpu", "GPU-a", "clear"); code != 0 || !strings.Contains(out, "cleared the event taints of 1 GPUs") {
		t.Fatalf("clear GPU-a: exit %d, stdout %q", code, out)
	}
	if _, out, _ := run("list"); strings.Contains(out, "GPU-a") || !strings.Contains(out, "GPU-b") {
		t.Errorf("after clearing GPU-a: %q", out)
	}
	if code, _, errOut := run("forget"); code != 2 || !strings.Contains(errOut, "list or clear") {
		t.Errorf("unknown action: exit %d, stderr %q", code, errOut)
	}
}
