package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startOrphan starts `sleep` outside the framework (no Pdeathsig), as a
// component left behind by a killed run would be.
func startOrphan(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sleep: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

func exePath(t *testing.T, pid int) string {
	t.Helper()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatalf("read exe of %d: %v", pid, err)
	}
	return exe
}

// stateDir lays out a state dir as Start does: owner record and pid files.
func stateDir(t *testing.T, root, name, owner string, pids map[string]string) string {
	t.Helper()
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Join(dir, "pids"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(owner), 0o600); err != nil {
		t.Fatal(err)
	}
	for file, rec := range pids {
		if err := os.WriteFile(filepath.Join(dir, "pids", file), []byte(rec), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func waitExit(cmd *exec.Cmd, d time.Duration) bool {
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

func TestCleanupStale(t *testing.T) {
	root := t.TempDir()
	self, err := ownerRecord(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}

	orphan := startOrphan(t)
	deadOwner := "999999999 1\n" // no such pid
	stale := stateDir(t, root, "cp-stale", deadOwner, map[string]string{
		"etcd.pid": fmt.Sprintf("%d\n%s\n", orphan.Process.Pid, exePath(t, orphan.Process.Pid)),
	})

	// A PID whose binary is not the recorded one was reused: leave it alone.
	bystander := startOrphan(t)
	reused := stateDir(t, root, "cp-reused", deadOwner, map[string]string{
		"kube-apiserver.pid": fmt.Sprintf("%d\n/nonexistent/kube-apiserver\n", bystander.Process.Pid),
	})

	// A live owner's control plane is not touched.
	mine := startOrphan(t)
	live := stateDir(t, root, "cp-live", self, map[string]string{
		"etcd.pid": fmt.Sprintf("%d\n%s\n", mine.Process.Pid, exePath(t, mine.Process.Pid)),
	})

	stopped, err := cleanupStale(root)
	if err != nil {
		t.Fatalf("cleanupStale: %v", err)
	}
	if len(stopped) != 1 || !strings.Contains(stopped[0], fmt.Sprint(orphan.Process.Pid)) {
		t.Errorf("stopped = %v, want only the orphan pid %d", stopped, orphan.Process.Pid)
	}
	if !waitExit(orphan, 5*time.Second) {
		t.Errorf("orphan of a dead owner still runs")
	}
	for _, dir := range []string{stale, reused} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("stale dir %s not removed (err %v)", dir, err)
		}
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("live owner's dir removed: %v", err)
	}
	for name, cmd := range map[string]*exec.Cmd{"bystander": bystander, "live owner's process": mine} {
		if err := syscall.Kill(cmd.Process.Pid, 0); err != nil {
			t.Errorf("%s was killed: %v", name, err)
		}
	}
}

func TestTailFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte("a\nb\nc\nd\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		n    int
		want string
	}{{2, "c\nd"}, {10, "a\nb\nc\nd"}}
	for _, tc := range tests {
		if got := tailFile(path, tc.n); got != tc.want {
			t.Errorf("tailFile(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
	if got := tailFile(filepath.Join(t.TempDir(), "missing"), 3); !strings.Contains(got, "no log") {
		t.Errorf("tailFile of a missing file = %q, want a 'no log' note", got)
	}
}

// TestReadProcStats reads this test process's own stats after burning
// some CPU: both fields must be positive.
func TestReadProcStats(t *testing.T) {
	deadline := time.Now().Add(50 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	st, err := readProcStats(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.CPU <= 0 || st.PeakRSS <= 0 {
		t.Errorf("stats %+v: want CPU and peak RSS > 0", st)
	}
}
