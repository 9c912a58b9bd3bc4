// Package metrics is gpufabric-scheduler's Prometheus metrics: the loop's
// own (attempts, placements, refusals, free GPUs, gang waits, the assume
// cache, the double-allocation guard's actions) and the commit, evict and
// replace rooms', registered together. Every method accepts a nil
// *Metrics (no metrics); every labelled series an alert may need exists
// from the start, at zero. It starts no goroutine: the queue's and the
// pending gangs' gauges are read at scrape time through Attach.
package metrics
