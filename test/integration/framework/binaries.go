package framework

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// BinDirEnv names the folder holding prebuilt control-plane binaries. When it
// is unset the framework runs hack/build-control-plane.sh, which builds them
// from the Go module proxy once and caches them.
const BinDirEnv = "GPUFABRIC_CONTROL_PLANE_BIN"

var (
	binDirOnce sync.Once
	binDir     string
	binDirErr  error
)

// binaryDir returns the folder with etcd, kube-apiserver, ... building them
// if needed. Safe for concurrent use; builds at most once per process.
func binaryDir() (string, error) {
	binDirOnce.Do(func() {
		if dir := os.Getenv(BinDirEnv); dir != "" {
			binDir, binDirErr = filepath.Abs(dir)
			return
		}
		binDir, binDirErr = buildBinaries()
	})
	return binDir, binDirErr
}

func buildBinaries() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(filepath.Join(root, "hack", "build-control-plane.sh"))
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr // progress of cold builds
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build control-plane binaries: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return lines[len(lines)-1], nil
}

// binary returns the absolute, symlink-free path of a component binary.
func binary(name string) (string, error) {
	dir, err := binaryDir()
	if err != nil {
		return "", err
	}
	path, err := filepath.EvalSymlinks(filepath.Join(dir, name))
	if err != nil {
		return "", fmt.Errorf("find %s in %s (set %s or run hack/build-control-plane.sh): %w", name, dir, BinDirEnv, err)
	}
	return path, nil
}

// RepoRoot finds the checkout's root: the nearest parent folder holding the
// gpufabric go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("get working dir: %w", err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte("module github.com/gpufabric/gpufabric\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repository root: no gpufabric go.mod above the working dir")
		}
		dir = parent
	}
}
