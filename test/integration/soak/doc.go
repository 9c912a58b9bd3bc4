// Package soak holds the chaos soak (TestChaosSoak): concurrent gangs on a
// real control plane while the scheduler process, with the chart's identity,
// is SIGKILLed at random moments behind a fault-injecting proxy; the
// commit's invariants must hold throughout. In its second half an
// adversarial tenant (namespace rights only) sends never-fitting gangs, a
// huge invalid annotation, slow selectors, claim churn and GPU-less channel
// gangs; the report compares the normal gangs' time to all bound in the two
// halves. Throughout, node faults hit running gangs (nodes stop
// heartbeating, get a NoExecute taint, are deleted; members fail; the
// nodes are repaired 20–30 s later) while the soak, as the gangs' workload
// controller, creates lost members again: every gang hit must end replaced
// in place, restarted whole or failed as its policy says, and no gang runs
// partly (GPUFABRIC_SOAK_NODE_FAULTS=0 turns them off). `make soak` runs it
// for SOAK_DURATION; `make test` runs 40 s of it.
package soak
