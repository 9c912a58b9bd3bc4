package placement_test

import (
	"syscall"
	"time"
)

// threadCPU returns the calling OS thread's CPU time (user + system).
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
