// Package fabric is the simulator's cluster: generated NVL72 and HGX
// fabrics (Generate), fabric files of nodes, ResourceSlices and existing
// load (File, Load), and the indexes the simulator's policies and metrics
// read (Fabric: nodes by position, domains per level, GPUs, busy GPUs and
// their positions, the tree the tree policies see). kubectl gpufabric's
// dry runs read the same file format.
//
// Rules: pure, no client-go; nodes are indexed by position in name order;
// a fabric never changes once built (the simulator's cluster state is
// pkg/sim's Cluster).
package fabric
