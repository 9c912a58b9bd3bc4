package failures

import (
	"fmt"
	"time"
)

// The Llama 3 405B pre-training figures (Llama Team, AI @ Meta, "The Llama
// 3 Herd of Models", 2024, section 3.3.4): 419 unexpected interruptions in
// a 54-day snapshot of pre-training on up to 16,384 H100 GPUs, about 78 %
// of them attributed to confirmed or suspected hardware issues (GPU, HBM,
// NVLink/network, host).
const (
	Llama3Interruptions = 419
	Llama3Days          = 54
	Llama3GPUs          = 16384
	Llama3HardwareShare = 0.78
)

// Llama3PerGPUHour is the interruption rate per GPU-hour of a running job:
// 419 / (54 d × 24 h × 16,384 GPUs) = 419 / 21,233,664 ≈ 1.973e-5.
func Llama3PerGPUHour() float64 {
	return float64(Llama3Interruptions) / (float64(Llama3Days) * 24 * float64(Llama3GPUs))
}

// Defaults of the costs; docs/design/simulator.md says why each.
const (
	// DefaultRepairTime is how long a node hit by a hardware failure stays
	// out: drain, diagnosis, reboot or part swap.
	DefaultRepairTime = 24 * time.Hour
	// DefaultCheckpointInterval is the work between two checkpoints.
	DefaultCheckpointInterval = 30 * time.Minute
	// DefaultRestartOverhead is the time from a job's (re)placement to
	// useful work again: containers, NCCL initialisation, checkpoint load.
	DefaultRestartOverhead = 10 * time.Minute
	// DefaultDegradedSpeed is the speed of a job one of whose members was
	// replaced outside its multi-node NVLink domain.
	DefaultDegradedSpeed = 0.75
)

// Model is the failure model of a run.
type Model struct {
	// PerGPUHour is the interruption rate per GPU-hour (all causes).
	PerGPUHour float64
	// HardwareShare of the interruptions take their node out for
	// RepairTime; the others restart the job in place.
	HardwareShare float64
	// Scale multiplies PerGPUHour (1: the published rate).
	Scale float64
	// RepairTime, CheckpointInterval and RestartOverhead in seconds.
	RepairTime, CheckpointInterval, RestartOverhead int64
	// DegradedSpeed is the work per second of a job that lost its NVLink
	// domain, in (0, 1].
	DegradedSpeed float64
}

// Default is the model at the published rate with the default costs.
func Default() Model {
	return Model{
		PerGPUHour: Llama3PerGPUHour(), HardwareShare: Llama3HardwareShare, Scale: 1,
		RepairTime:         int64(DefaultRepairTime / time.Second),
		CheckpointInterval: int64(DefaultCheckpointInterval / time.Second),
		RestartOverhead:    int64(DefaultRestartOverhead / time.Second),
		DegradedSpeed:      DefaultDegradedSpeed,
	}
}

// Validate reports a model that cannot run.
func (m Model) Validate() error {
	switch {
	case m.PerGPUHour < 0 || m.Scale < 0:
		return fmt.Errorf("failure rate %g × %g: must not be negative", m.PerGPUHour, m.Scale)
	case m.HardwareShare < 0 || m.HardwareShare > 1:
		return fmt.Errorf("hardware share %g: must be in [0, 1]", m.HardwareShare)
	case m.RepairTime < 0 || m.RestartOverhead < 0:
		return fmt.Errorf("repair time %d s, restart overhead %d s: must not be negative", m.RepairTime, m.RestartOverhead)
	case m.CheckpointInterval <= 0:
		return fmt.Errorf("checkpoint interval %d s: must be positive", m.CheckpointInterval)
	case m.DegradedSpeed <= 0 || m.DegradedSpeed > 1:
		return fmt.Errorf("degraded speed %g: must be in (0, 1]", m.DegradedSpeed)
	}
	return nil
}

// Rate is the scaled interruption rate per GPU-second.
func (m Model) Rate() float64 { return m.PerGPUHour * m.Scale / 3600 }
