package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set by -ldflags -X; empty in a plain `go build`.
var (
	version = ""
	commit  = ""
)

// Unknown is the commit of a build that carries no VCS information.
const Unknown = "unknown"

// Devel is the version of a build without -ldflags.
const Devel = "devel"

// Info identifies a build.
type Info struct {
	// Version is the release ("v0.2.0", "v0.2.0-3-gabc1234-dirty" from git
	// describe) or Devel.
	Version string `json:"version"`
	// Commit is the git commit, with "-dirty" when the tree had changes,
	// or Unknown.
	Commit string `json:"commit"`
	// GoVersion is the toolchain that built the binary.
	GoVersion string `json:"goVersion"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

// Get returns this build's Info.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(version, commit, bi)
}

// resolve fills what -ldflags left empty from the build info (nil: none).
func resolve(v, c string, bi *debug.BuildInfo) Info {
	info := Info{Version: v, Commit: c, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version // go install module@version
		}
		if info.Commit == "" {
			info.Commit = vcsCommit(bi.Settings)
		}
	}
	if info.Version == "" {
		info.Version = Devel
	}
	if info.Commit == "" {
		info.Commit = Unknown
	}
	return info
}

// vcsCommit is vcs.revision, with "-dirty" when vcs.modified; "" without.
func vcsCommit(settings []debug.BuildSetting) string {
	var rev string
	var dirty bool
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" && dirty {
		rev += "-dirty"
	}
	return rev
}

// String is the one line --version prints after the binary's name:
// "v0.2.0 (commit 1a2b3c, go1.26.8, linux/amd64)".
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, %s, %s)", i.Version, i.Commit, i.GoVersion, i.Platform)
}

// Line is what `<binary> --version` prints: "<name> <String()>\n".
func (i Info) Line(name string) string {
	return name + " " + i.String() + "\n"
}

// KeysAndValues are the structured-logging pairs of the first log line.
func (i Info) KeysAndValues() []any {
	return []any{"version", i.Version, "commit", i.Commit, "goVersion", i.GoVersion, "platform", i.Platform}
}

// IsVersionFlag reports whether arg asks for the version (--version,
// -version, --version=true).
func IsVersionFlag(arg string) bool {
	name, value, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
	return strings.HasPrefix(arg, "-") && name == "version" && (!hasValue || value == "true")
}
