// Package deps keeps the pinned dependencies in go.mod while the packages
// that use them are being written. Delete it once every import is real.
package deps

import (
	_ "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	_ "github.com/NVIDIA/go-nvml/pkg/nvml"
	_ "github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "k8s.io/api/scheduling/v1beta1"
	_ "k8s.io/client-go/informers"
	_ "k8s.io/client-go/tools/leaderelection"
	_ "k8s.io/component-base/metrics/legacyregistry"
	_ "k8s.io/component-helpers/scheduling/corev1"
	_ "k8s.io/dynamic-resource-allocation/deviceattribute"
	_ "k8s.io/dynamic-resource-allocation/kubeletplugin"
	_ "k8s.io/dynamic-resource-allocation/resourceclaim"
	_ "k8s.io/dynamic-resource-allocation/resourceslice"
	_ "k8s.io/dynamic-resource-allocation/structured"
	_ "k8s.io/klog/v2"
	_ "k8s.io/kubelet/pkg/apis/dra/v1"
	_ "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	_ "sigs.k8s.io/yaml"
	_ "tags.cncf.io/container-device-interface/pkg/cdi"
	_ "tags.cncf.io/container-device-interface/specs-go"
)
