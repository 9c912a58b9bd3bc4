//go:build tools

// Package tools pins the Kueue controller manager that hack/build-kueue.sh
// builds from the Go module proxy for the integration tests. It is kept out
// of the main go.mod: Kueue pins k8s.io/* of an older minor.
package tools

import _ "sigs.k8s.io/kueue/cmd/kueue"
