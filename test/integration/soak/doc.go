// Package soak holds the chaos soak (TestChaosSoak): concurrent gangs on a
// real control plane while the scheduler process, with the chart's identity,
// is SIGKILLed at random moments behind a fault-injecting proxy; the
// commit's invariants must hold throughout. `make soak` runs it for
// SOAK_DURATION; `make test` runs 40 s of it.
package soak
