// Package podstate holds the pod predicates every room of
// gpufabric-scheduler shares: whose pod it is, and whether it waits for a
// node or has finished. Pure: a pod in, a bool out.
package podstate
