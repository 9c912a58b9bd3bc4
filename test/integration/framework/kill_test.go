package framework

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
)

const childEnv = "GPUFABRIC_FRAMEWORK_KILL_CHILD"

// TestKilledRunLeavesNothing starts a control plane in a child process, kills
// the child with SIGKILL (no cleanup runs), and checks that its components
// die with it and that the next Start on the same state root removes what it
// left and comes up.
func TestKilledRunLeavesNothing(t *testing.T) {
	if root := os.Getenv(childEnv); root != "" {
		runChild(t, root)
		return
	}
	root := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledRunLeavesNothing$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+root)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child: %v", err)
	}
	pids, dir := readReady(t, stdout)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()

	deadline := time.Now().Add(15 * time.Second)
	for _, pid := range pids {
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("component pid %d outlived its killed owner", pid)
		}
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("expected the killed run's state dir to remain until the next run: %v", err)
	}

	_, ctx := ktesting.NewTestContext(t)
	cp, err := Start(ctx, Options{StateRoot: root})
	if err != nil {
		t.Fatalf("start after a killed run: %v", err)
	}
	defer cp.Stop()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the killed run's state dir %s was not removed (err %v)", dir, err)
	}
	if _, err := cp.AdminClient(t).Discovery().ServerVersion(); err != nil {
		t.Errorf("new control plane does not serve: %v", err)
	}
}

// runChild is the child's side: start, report, and wait to be killed.
func runChild(t *testing.T, root string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cp, err := Start(ctx, Options{StateRoot: root})
	if err != nil {
		t.Fatalf("child start: %v", err)
	}
	var pids []string
	for _, p := range cp.procs {
		pids = append(pids, strconv.Itoa(p.cmd.Process.Pid))
	}
	fmt.Printf("READY %s %s\n", cp.Dir(), strings.Join(pids, ","))
	time.Sleep(10 * time.Minute)
}

func readReady(t *testing.T, r interface{ Read([]byte) (int, error) }) ([]int, string) {
	t.Helper()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 || fields[0] != "READY" {
			continue
		}
		var pids []int
		for _, s := range strings.Split(fields[2], ",") {
			pid, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("bad pid %q", s)
			}
			pids = append(pids, pid)
		}
		if filepath.Dir(fields[1]) == "" || len(pids) < 2 {
			t.Fatalf("bad READY line %q", sc.Text())
		}
		return pids, fields[1]
	}
	t.Fatalf("child exited before it was ready: %v", sc.Err())
	return nil, ""
}
