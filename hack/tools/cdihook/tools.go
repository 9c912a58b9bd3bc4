//go:build tools

// Package tools pins nvidia-cdi-hook, the program the CDI specs' hooks run
// (symlinks, ldcache), at the nvidia-container-toolkit version whose nvcdi
// the plugin uses. The plugin image and hack/build-node.sh build it from
// here; it stays out of the main go.mod, which needs only pkg/nvcdi.
package tools

import _ "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook"
