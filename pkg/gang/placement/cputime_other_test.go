//go:build !linux

package placement_test

import "time"

// threadCPU is not measured outside Linux.
func threadCPU() time.Duration { return 0 }
