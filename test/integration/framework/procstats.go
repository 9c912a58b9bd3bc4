package framework

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ProcStats is what the kernel says of a process: CPU time used (user +
// system) and its peak resident set.
type ProcStats struct {
	CPU     time.Duration
	PeakRSS int64 // bytes
}

// userHZ is the unit of utime and stime in /proc/<pid>/stat (USER_HZ, 100
// on every Linux architecture Go supports).
const userHZ = 100

// ProcessStats reads the ProcStats of the process started as name (by
// StartProcess, or a component such as "kube-scheduler") from /proc.
func (cp *ControlPlane) ProcessStats(name string) (ProcStats, error) {
	p := cp.process(name)
	if p == nil {
		return ProcStats{}, fmt.Errorf("no process %s", name)
	}
	return readProcStats(p.cmd.Process.Pid)
}

// SelfStats reads the ProcStats of this process (the test binary).
func SelfStats() (ProcStats, error) { return readProcStats(os.Getpid()) }

func readProcStats(pid int) (ProcStats, error) {
	var out ProcStats
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return out, fmt.Errorf("read stat: %w", err)
	}
	// The command name (field 2) may hold spaces; fields after it start at
	// state (field 3). utime and stime are fields 14 and 15.
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return out, fmt.Errorf("short stat %q", s)
	}
	var ticks int64
	for _, f := range fields[11:13] {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return out, fmt.Errorf("parse stat: %w", err)
		}
		ticks += v
	}
	out.CPU = time.Duration(ticks) * time.Second / userHZ
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return out, fmt.Errorf("read status: %w", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return out, fmt.Errorf("parse VmHWM: %w", err)
			}
			out.PeakRSS = kb << 10
		}
	}
	return out, nil
}
