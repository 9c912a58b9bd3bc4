// Package volumepins pins a gang's members to the nodes their persistent
// volumes allow (Pins), from the scheduler's listers; the loop
// (pkg/gang/scheduler) calls it before it places a gang. It was moved out
// of the loop unchanged.
//
// Rules: a bound volume with node affinity pins its member; an unbound
// claim makes the gang wait (placement.ErrNotReady), unless its
// StorageClass waits for a first consumer (placement.ErrUnsupported).
package volumepins
