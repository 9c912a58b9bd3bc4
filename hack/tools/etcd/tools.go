//go:build tools

// Package tools pins etcd so that hack/build-control-plane.sh can build it
// from the Go module proxy without touching the main go.mod.
package tools

import _ "go.etcd.io/etcd/server/v3"
