// Package failures is the simulator's failure model: interruption rates
// derived from published figures, a seeded schedule of node failures, and
// the checkpoint/restart arithmetic of one job.
//
// Files: model.go (rates and costs, the Llama 3 figures), schedule.go (the
// seeded failure schedule), progress.go (a job's work, checkpoints and what
// a failure costs it).
//
// Rules: pure and deterministic — no clock, no I/O, no randomness except
// the schedule's seeded PCG. Times are whole seconds of simulated time.
//
// See docs/design/simulator.md, "Failures and goodput".
package failures
