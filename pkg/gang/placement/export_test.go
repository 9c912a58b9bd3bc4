package placement

// GreedyOnly turns the search over member placements off (search.go), as
// the engine was before it: tests count the gangs only the search places.
func GreedyOnly(cfg *Config) { cfg.greedyOnly = true }

// OldRails turns rail alignment back to what it was before the search over
// rail sets: required alignment refills only with the four most used rail
// sets of the first fill (no device on every rail), and NICs do not follow
// their GPUs. Benchmarks and tests compare the two.
func OldRails(cfg *Config) { cfg.oldRails = true }
