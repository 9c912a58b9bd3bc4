// Package placementtest holds the placement tests' helpers that production
// code never needs: an independent checker of decisions (rails included)
// and an index.Cache fed as the informers would. Fixtures themselves are
// built with pkg/gang/placement/scenario. Production code must not import
// this package (pkg/archtest checks the binaries).
package placementtest
