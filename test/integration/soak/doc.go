// Package soak holds the chaos soak (TestChaosSoak): concurrent gangs on a
// real control plane while the scheduler process, with the chart's identity,
// is SIGKILLed at random moments behind a fault-injecting proxy; the
// commit's invariants must hold throughout. In its second half an
// adversarial tenant (namespace rights only) sends never-fitting gangs, a
// huge invalid annotation, slow selectors, claim churn and GPU-less channel
// gangs; the report compares the normal gangs' time to all bound in the two
// halves. `make soak` runs it for SOAK_DURATION; `make test` runs 40 s of it.
package soak
