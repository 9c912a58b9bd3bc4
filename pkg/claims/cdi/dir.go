package cdi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpufabric/gpufabric/pkg/claims/checkpoint"
	"github.com/gpufabric/gpufabric/pkg/internal/fsutil"
)

// Dir is a CDI spec directory (e.g. /var/run/cdi) holding this driver's
// per-claim specs. It keeps no state and is safe for concurrent use on
// different claims.
type Dir struct {
	root string
	sync bool
}

// NewDir returns the spec directory at root, creating it if needed.
// sync=false skips fsync (tests and benchmarks only).
func NewDir(root string, sync bool) (*Dir, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("create cdi root: %w", err)
	}
	return &Dir{root: root, sync: sync}, nil
}

// fileBase is the spec file name without extension.
func fileBase(uid types.UID) string {
	return cdiapi.GenerateTransientSpecName(Vendor, Class, string(uid))
}

// filePrefix starts the name of every spec file of this driver, as
// cdiapi.GenerateTransientSpecName makes them (see TestFilePrefix).
const filePrefix = Vendor + "-" + Class + "_"

// SpecPath returns the path of the claim's spec file.
func (d *Dir) SpecPath(uid types.UID) string {
	return filepath.Join(d.root, fileBase(uid)+".json")
}

// Write validates spec with the CDI library and writes it atomically
// (temporary file, fsync, validation of the written bytes with
// cdi.ReadSpec, rename, directory fsync). Idempotent.
func (d *Dir) Write(uid types.UID, spec *cdispec.Spec) error {
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return fmt.Errorf("encode cdi spec: %w", err)
	}
	validate := func(tmp string) error {
		if _, err := cdiapi.ReadSpec(tmp, 0); err != nil {
			return fmt.Errorf("invalid cdi spec: %w", err)
		}
		return nil
	}
	if err := fsutil.WriteFileAtomic(d.SpecPath(uid), data, 0o644, d.sync, validate); err != nil {
		return fmt.Errorf("write cdi spec: %w", err)
	}
	return nil
}

// Remove deletes the claim's spec file (and fsyncs the directory); a
// missing file is not an error.
func (d *Dir) Remove(uid types.UID) error {
	if err := fsutil.Remove(d.SpecPath(uid), d.sync); err != nil {
		return fmt.Errorf("remove cdi spec: %w", err)
	}
	return nil
}

// Exists tells whether the claim's spec file exists.
func (d *Dir) Exists(uid types.UID) (bool, error) {
	_, err := os.Stat(d.SpecPath(uid))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stat cdi spec: %w", err)
	}
	return true, nil
}

// Found is a spec file of this driver found on disk.
type Found struct {
	Path string
	// UID is the claim UID from the file name.
	UID types.UID
	// Claim is the claim read from the spec, nil if Err is set.
	Claim *checkpoint.Claim
	// Err says why the file could not be read or validated.
	Err error
}

// List returns this driver's spec files in the directory, each validated
// with the CDI library and parsed.
func (d *Dir) List() ([]Found, error) {
	entries, err := os.ReadDir(d.root)
	if err != nil {
		return nil, fmt.Errorf("read cdi root: %w", err)
	}
	var found []Found
	for _, e := range entries {
		name := e.Name()
		base, ok := strings.CutSuffix(name, ".json")
		if e.IsDir() || !ok || !strings.HasPrefix(base, filePrefix) {
			continue
		}
		f := Found{Path: filepath.Join(d.root, name), UID: types.UID(strings.TrimPrefix(base, filePrefix))}
		f.Claim, f.Err = readClaim(f.Path, f.UID)
		found = append(found, f)
	}
	return found, nil
}

func readClaim(path string, uid types.UID) (*checkpoint.Claim, error) {
	spec, err := cdiapi.ReadSpec(path, 0)
	if err != nil {
		return nil, fmt.Errorf("read cdi spec: %w", err)
	}
	c, err := ParseClaim(spec.Spec)
	if err != nil {
		return nil, err
	}
	if c.UID != uid {
		return nil, fmt.Errorf("spec is for claim %s, file name says %s", c.UID, uid)
	}
	return c, nil
}

// RemoveStaleTemps removes temporary files left by a crash during Write.
func (d *Dir) RemoveStaleTemps() ([]string, error) {
	return fsutil.RemoveStaleTemps(d.root, filePrefix)
}
