//go:build tools

// Package tools pins kwok (fake node and pod lifecycle for the demo and the
// scale tests) so that it builds from the Go module proxy.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
