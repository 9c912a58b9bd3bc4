// Package fsutil writes and removes files so that a crash leaves either the
// old or the new content, never a torn file.
package fsutil

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// TempSuffix ends the names of temporary files. Stale ones (from a crash
// between create and rename) can be removed with RemoveStaleTemps.
const TempSuffix = ".tmp"

// WriteFileAtomic writes data to path: a temporary file in the same
// directory is written, fsynced, checked with check (if not nil; it gets
// the temporary path), renamed over path, and the directory is fsynced.
// Readers see the old or the complete new file; once it returns, the new
// file survives a power loss. sync=false skips both fsyncs (tests only).
// Temporary names start with "." and end with TempSuffix, so directory
// scanners that look for *.json or *.yaml never see them.
func WriteFileAtomic(path string, data []byte, perm os.FileMode, sync bool, check func(tmpPath string) error) (err error) {
	dir, base := filepath.Split(path)
	tmp, err := os.CreateTemp(dir, "."+base+".*"+TempSuffix)
	if err != nil {
		return fmt.Errorf("create temporary file: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(perm); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if sync {
		if err := tmp.Sync(); err != nil {
			_ = tmp.Close()
			return fmt.Errorf("fsync %s: %w", tmp.Name(), err)
		}
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if check != nil {
		if err := check(tmp.Name()); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename into place: %w", err)
	}
	if sync {
		return SyncDir(dir)
	}
	return nil
}

// Remove removes path and fsyncs its directory (when sync is set). A path
// that does not exist is not an error.
func Remove(path string, sync bool) error {
	err := os.Remove(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove: %w", err)
	}
	if sync {
		return SyncDir(filepath.Dir(path))
	}
	return nil
}

// SyncDir fsyncs a directory so that renames and removals in it are durable.
func SyncDir(dir string) error {
	if dir == "" {
		dir = "."
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory: %w", err)
	}
	defer func() { _ = d.Close() }()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// RemoveStaleTemps removes the temporary files WriteFileAtomic left in dir
// for files whose name starts with prefix. It returns the removed paths.
func RemoveStaleTemps(dir, prefix string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read directory: %w", err)
	}
	var removed []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasPrefix(name, "."+prefix) || !strings.HasSuffix(name, TempSuffix) {
			continue
		}
		p := filepath.Join(dir, name)
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return removed, fmt.Errorf("remove stale temporary file: %w", err)
		}
		removed = append(removed, p)
	}
	return removed, nil
}
