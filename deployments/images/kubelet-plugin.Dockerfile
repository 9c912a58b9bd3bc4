# syntax=docker/dockerfile:1
# The gpufabric kubelet plugin. Build from the repository root:
#   docker build -f deployments/images/kubelet-plugin.Dockerfile -t gpufabric/kubelet-plugin:dev .
# go-nvml needs cgo, so the binary links glibc dynamically: builder and
# runtime are the same Debian release (trixie = Debian 13). NVML itself
# (libnvidia-ml.so.1) is not in the image; the chart mounts the host's driver
# at /driver-root and points LD_LIBRARY_PATH at it.
ARG GO_IMAGE=golang:1.26-trixie
ARG RUNTIME_IMAGE=gcr.io/distroless/base-debian13

FROM ${GO_IMAGE} AS build
# The build's version and commit (make ldflags; hack/kind-up.sh passes them):
# --version, the first log line, gpufabric_kubelet_plugin_build_info.
ARG VERSION=devel
ARG COMMIT=unknown
WORKDIR /src
ENV CGO_ENABLED=1 CGO_CFLAGS=-Wno-deprecated-declarations GOFLAGS=-trimpath
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY cmd/ cmd/
# pkg/ includes the mock backend (pkg/devices/mock, values-mock.yaml).
COPY pkg/ pkg/
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -ldflags="-s -w -X github.com/gpufabric/gpufabric/pkg/component/version.version=${VERSION} -X github.com/gpufabric/gpufabric/pkg/component/version.commit=${COMMIT}" \
      -o /out/gpufabric-kubelet-plugin ./cmd/kubelet-plugin
# nvidia-cdi-hook, which the CDI specs' hooks run on the host: the plugin
# installs this copy (same nvidia-container-toolkit version as its nvcdi)
# so that nodes need no NVIDIA Container Toolkit. Linked statically: it runs
# with the host's libc, whatever that is (go-nvml needs cgo; the hook never
# dlopens).
COPY hack/tools/cdihook/ hack/tools/cdihook/
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    cd hack/tools/cdihook && go build -ldflags='-s -w -linkmode external -extldflags "-static"' \
      -o /out/nvidia-cdi-hook github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook

FROM ${RUNTIME_IMAGE}
LABEL org.opencontainers.image.title="gpufabric kubelet plugin" \
      org.opencontainers.image.source="https://github.com/gpufabric/gpufabric"
COPY --from=build /out/gpufabric-kubelet-plugin /usr/bin/gpufabric-kubelet-plugin
COPY --from=build /out/nvidia-cdi-hook /usr/bin/nvidia-cdi-hook
# Root: it writes the kubelet's plugin dirs and the CDI dir on the host.
USER 0:0
ENTRYPOINT ["/usr/bin/gpufabric-kubelet-plugin"]
CMD ["run"]
