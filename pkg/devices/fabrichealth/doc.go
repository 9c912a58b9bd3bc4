// Package fabrichealth turns link error counters into fabric health: it
// reads NVLink error counters through NVML and InfiniBand port counters
// from sysfs (counters.go), and keeps, per device and counter, the increase
// over a sliding window (window.go). The kubelet plugin publishes the
// result as the fabricErrors attribute and, past its threshold, the
// gpufabric.dev/fabric-errors taint (docs/design/health.md, "Sick
// fabric").
//
// Files: counters.go (counter names, Reading, ReadNVLinks, ReadIBPorts),
// window.go (Config, Tracker, Health).
//
// Rules:
//   - A counter that cannot be read (no such link, no counters file,
//     garbage in it, NVML not supported) is left out, never an error; a
//     counter that comes back later starts a new baseline.
//   - The first reading of a counter is its baseline: errors counted
//     before the plugin started do not count.
//   - A value below the previous one is a reset (or a wrap): the increase
//     is the new value.
//   - Memory is bounded: per device and counter at most maxEntries
//     increases are kept (the oldest merge), and counters not in the
//     latest sample are forgotten.
//   - A leaf: it imports pkg/topology only (pkg/archtest), never
//     pkg/devices; the Tracker is pure (no I/O, the caller's clock).
package fabrichealth
