#!/usr/bin/env bash
# Quickstart on kind (needs docker, kind and kubectl; helm is taken from PATH
# or built by hack/install-tools.sh): creates the cluster from
# deployments/kind/kind-config.yaml (1.37 gates, four labelled "GPU"
# workers), builds and loads both images, installs the chart with the mock
# profile and runs the example gang in deployments/kind/example/.
#
#   hack/kind-up.sh            everything
#   hack/kind-up.sh --no-build reuse images already loaded
#   hack/kind-up.sh --no-example
#   hack/kind-up.sh --down     delete the cluster
#
# Environment: KIND_NODE_IMAGE (default kindest/node:v1.37.1), IMAGE_TAG
# (default dev), RELEASE_NAMESPACE (default gpufabric-system).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cluster=gpufabric # fixed: the mock fabric names the nodes gpufabric-worker*
config=$root/deployments/kind/kind-config.yaml
chart=$root/deployments/helm/gpufabric
node_image=${KIND_NODE_IMAGE:-kindest/node:v1.37.1}
tag=${IMAGE_TAG:-dev}
ns=${RELEASE_NAMESPACE:-gpufabric-system}
plugin_image=gpufabric/kubelet-plugin:$tag
scheduler_image=gpufabric/scheduler:$tag
build=1 example=1

log() { echo "[kind-up] $*" >&2; }
die() { log "$*"; exit 1; }

for arg in "$@"; do
	case $arg in
	--no-build) build=0 ;;
	--no-example) example=0 ;;
	--down) kind delete cluster --name "$cluster"; exit ;;
	-h | --help) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit ;;
	*) die "unknown argument $arg (see --help)" ;;
	esac
done

for tool in docker kind kubectl; do
	command -v "$tool" >/dev/null || die "$tool is required"
done
helm=$(command -v helm || true)
if [[ -z $helm ]]; then
	log "helm not on PATH: building it (hack/install-tools.sh helm; a few minutes cold)"
	helm="$("$root/hack/install-tools.sh" helm | tail -n1)/helm"
fi

if kind get clusters | grep -qx "$cluster"; then
	log "cluster $cluster exists"
else
	log "creating cluster $cluster ($node_image)"
	kind create cluster --config "$config" --image "$node_image" --wait 120s
fi
kubectl config use-context "kind-$cluster" >/dev/null
kctl() { kubectl --context "kind-$cluster" "$@"; }

# The kind config labels the workers already; label again for kind versions
# that ignore node labels in the config.
for n in $(kctl get nodes -o name -l '!node-role.kubernetes.io/control-plane'); do
	kctl label --overwrite "$n" gpufabric.dev/gpu-node=true >/dev/null
done

if ((build)); then
	log "building $plugin_image and $scheduler_image"
	# The version and commit `make build` stamps (pkg/component/version).
	stamp=(--build-arg "VERSION=$(cd "$root" && git describe --tags --match 'v*' --dirty 2>/dev/null || echo devel)"
		--build-arg "COMMIT=$(cd "$root" && git rev-parse HEAD 2>/dev/null || echo unknown)")
	DOCKER_BUILDKIT=1 docker build "${stamp[@]}" -f "$root/deployments/images/kubelet-plugin.Dockerfile" -t "$plugin_image" "$root"
	DOCKER_BUILDKIT=1 docker build "${stamp[@]}" -f "$root/deployments/images/scheduler.Dockerfile" -t "$scheduler_image" "$root"
fi
log "loading images into the nodes"
kind load docker-image --name "$cluster" "$plugin_image" "$scheduler_image"

log "installing the chart (mock profile) into $ns"
kctl create namespace "$ns" --dry-run=client -o yaml | kctl apply -f - >/dev/null
# hostPath volumes: the plugin needs the privileged Pod Security level.
kctl label --overwrite namespace "$ns" pod-security.kubernetes.io/enforce=privileged >/dev/null
"$helm" upgrade --install gpufabric "$chart" --kube-context "kind-$cluster" -n "$ns" \
	-f "$chart/values-mock.yaml" \
	--set kubeletPlugin.image.repository=gpufabric/kubelet-plugin \
	--set scheduler.image.repository=gpufabric/scheduler \
	--set-string kubeletPlugin.image.tag="$tag",scheduler.image.tag="$tag" \
	--wait --timeout 5m

workers=$(kctl get nodes -l gpufabric.dev/gpu-node=true -o name | wc -l)
log "waiting for the ResourceSlices of $workers nodes and their NVLink domains"
for _ in $(seq 60); do
	node_pools=$(kctl get resourceslices -o jsonpath='{range .items[?(@.spec.driver=="gpufabric.dev")]}{.spec.nodeName}{"\n"}{end}' | sort -u | grep -c . || true)
	domain_pools=$(kctl get resourceslices -o jsonpath='{range .items[?(@.spec.driver=="gpufabric.dev")]}{.spec.pool.name}{"\n"}{end}' | grep '^fabric-domain\.' | sort -u | grep -c . || true)
	((node_pools >= workers && domain_pools > 0)) && break
	sleep 2
done
((node_pools >= workers && domain_pools > 0)) || die "only $node_pools node pools and $domain_pools domain pools after 2 minutes"
kctl get resourceslices -o wide

if ((example)); then
	log "running the example gang (deployments/kind/example)"
	kctl apply -f "$root/deployments/kind/example/"
	if ! kctl -n fabric-demo wait --for=condition=complete job/train --timeout=5m; then
		kctl -n fabric-demo get podgroup,pods,resourceclaims -o wide || true
		kctl -n fabric-demo get events --sort-by=.lastTimestamp | tail -20 || true
		die "the example job did not complete"
	fi
	kctl -n fabric-demo get pods -o wide
	kctl -n fabric-demo logs -l job-name=train --prefix
fi
log "done: kubectl --context kind-$cluster get pods -A"
