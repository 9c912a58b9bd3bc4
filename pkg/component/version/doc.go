// Package version says which build of gpufabric runs: the version and
// commit set at build time with
//
//	-ldflags "-X github.com/gpufabric/gpufabric/pkg/component/version.version=v0.2.0
//	          -X github.com/gpufabric/gpufabric/pkg/component/version.commit=<sha>"
//
// (the Makefile and the Dockerfiles do), or "devel" and the VCS stamp the
// Go toolchain records (runtime/debug.ReadBuildInfo) without them. Every
// binary prints it for --version, puts it in its first log line and, when
// it serves metrics, exposes it as gpufabric_<component>_build_info.
//
// Files: version.go (Info, Get, --version output, log values),
// metric.go (the build_info gauge).
package version
