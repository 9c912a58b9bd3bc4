package framework

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A process is one control-plane component started by the framework. Its
// output goes to a log file, and its PID is recorded under the control
// plane's state dir so that a later run can stop it if this test process dies
// without cleaning up.
type process struct {
	name    string
	binary  string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
}

// startProcess starts binary with args. stateDir/pids/<name>.pid records the
// PID and binary path. The child gets its own process group and is killed by
// the kernel if the thread that started it dies (Pdeathsig).
func startProcess(stateDir, name, binary string, args []string, env []string) (*process, error) {
	logPath := filepath.Join(stateDir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create log for %s: %w", name, err)
	}
	defer logFile.Close()
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, binary: binary, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	rec := fmt.Sprintf("%d\n%s\n", cmd.Process.Pid, binary)
	if err := os.WriteFile(filepath.Join(stateDir, "pids", name+".pid"), []byte(rec), 0o600); err != nil {
		p.stop(time.Second)
		return nil, fmt.Errorf("record pid of %s: %w", name, err)
	}
	return p, nil
}

// exited reports whether the process has ended, with its wait error.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// stop sends SIGTERM to the process group, waits up to grace, then SIGKILL.
// Idempotent.
func (p *process) stop(grace time.Duration) {
	if done, _ := p.exited(); done {
		return
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
}

// logTail returns the last n lines of the process's log.
func (p *process) logTail(n int) string {
	return tailFile(p.logPath, n)
}

func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ownerRecord identifies the test process that owns a state dir: its PID and
// its start time in clock ticks, so a reused PID is not taken for the owner.
func ownerRecord(pid int) (string, error) {
	start, err := processStartTime(pid)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d %d\n", pid, start), nil
}

func processStartTime(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read stat of pid %d: %w", pid, err)
	}
	// The command name may contain spaces; fields after the closing paren.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse stat of pid %d", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	const startTimeField = 19 // field 22 of stat, counted after "pid (comm)"
	if len(fields) <= startTimeField {
		return 0, fmt.Errorf("parse stat of pid %d: %d fields", pid, len(fields))
	}
	return strconv.ParseUint(fields[startTimeField], 10, 64)
}

// ownerAlive reports whether the owner recorded in dir is still running.
func ownerAlive(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "owner"))
	if err != nil {
		return false
	}
	var pid int
	var start uint64
	if _, err := fmt.Sscanf(string(data), "%d %d", &pid, &start); err != nil {
		return false
	}
	got, err := processStartTime(pid)
	return err == nil && got == start
}

// cleanupStale stops the processes recorded by control planes whose owning
// test process is gone, and removes their state dirs. It returns what it
// stopped, for the log.
func cleanupStale(root string) ([]string, error) {
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", root, err)
	}
	var stopped []string
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "cp-") || ownerAlive(dir) {
			continue
		}
		// A dir being set up has no owner file for a moment; give it a grace period.
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) < 5*time.Second {
			if _, err := os.Stat(filepath.Join(dir, "owner")); errors.Is(err, os.ErrNotExist) {
				continue
			}
		}
		stopped = append(stopped, killRecorded(filepath.Join(dir, "pids"))...)
		if err := os.RemoveAll(dir); err != nil {
			return stopped, fmt.Errorf("remove stale %s: %w", dir, err)
		}
	}
	return stopped, nil
}

// killRecorded kills every recorded process that still runs the recorded
// binary (a PID reused by another program is left alone).
func killRecorded(pidDir string) []string {
	files, _ := filepath.Glob(filepath.Join(pidDir, "*.pid"))
	var stopped []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		parts := strings.SplitN(strings.TrimSpace(string(data)), "\n", 2)
		pid, err := strconv.Atoi(parts[0])
		if err != nil || len(parts) != 2 {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || strings.TrimSuffix(exe, " (deleted)") != parts[1] {
			continue
		}
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		stopped = append(stopped, fmt.Sprintf("%s (pid %d)", filepath.Base(parts[1]), pid))
	}
	return stopped
}
