# syntax=docker/dockerfile:1
# gpufabric-scheduler (gang scheduler + fabric-domain controller) and
# gpufabric-grouper (the gangs of JobSets, LeaderWorkerSets, RayClusters...). Build from
# the repository root:
#   docker build -f deployments/images/scheduler.Dockerfile -t gpufabric/scheduler:dev .
# Pure Go (no cgo): cross-compiled on the build platform, static runtime.
ARG GO_IMAGE=golang:1.26-trixie
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian13:nonroot

FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS build
ARG TARGETOS
ARG TARGETARCH
# The build's version and commit (make ldflags; hack/kind-up.sh passes them):
# --version, the first log line, gpufabric_scheduler_build_info.
ARG VERSION=devel
ARG COMMIT=unknown
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-trimpath
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY cmd/ cmd/
COPY pkg/ pkg/
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build \
      -ldflags="-s -w -X github.com/gpufabric/gpufabric/pkg/component/version.version=${VERSION} -X github.com/gpufabric/gpufabric/pkg/component/version.commit=${COMMIT}" \
      -o /out/gpufabric-scheduler ./cmd/scheduler && \
    GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build \
      -ldflags="-s -w -X github.com/gpufabric/gpufabric/pkg/component/version.version=${VERSION} -X github.com/gpufabric/gpufabric/pkg/component/version.commit=${COMMIT}" \
      -o /out/gpufabric-grouper ./cmd/grouper

FROM ${RUNTIME_IMAGE}
LABEL org.opencontainers.image.title="gpufabric scheduler" \
      org.opencontainers.image.source="https://github.com/gpufabric/gpufabric"
COPY --from=build /out/gpufabric-scheduler /usr/bin/gpufabric-scheduler
# gpufabric-grouper runs from the same image (its own Deployment and
# identity in the chart).
COPY --from=build /out/gpufabric-grouper /usr/bin/gpufabric-grouper
USER 65532:65532
ENTRYPOINT ["/usr/bin/gpufabric-scheduler"]
