package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/internal/fsutil"
)

// FileName is the checkpoint's file name inside the state directory.
const FileName = "checkpoint.json"

// corruptSuffix is inserted between the file name and a UTC timestamp when a
// corrupted checkpoint is moved aside.
const corruptSuffix = ".corrupt-"

// File is the checkpoint file at one path.
type File struct {
	path string
	sync bool
}

// NewFile returns the checkpoint file at path. sync=false skips fsync
// (benchmarks and tests only: a crash may then lose the last write).
func NewFile(path string, sync bool) *File { return &File{path: path, sync: sync} }

// Path returns the file's path.
func (f *File) Path() string { return f.path }

// envelope is the on-disk form of version 2. Checksum is
// "sha256:<hex>" over the compacted JSON of Data.
type envelope struct {
	Version  int             `json:"version"`
	Checksum string          `json:"checksum"`
	Data     json.RawMessage `json:"data"`
}

// Load reads the checkpoint. A missing file gives an empty checkpoint.
// A file that cannot be trusted gives an error wrapping ErrCorrupt; other
// read errors are returned as they are. Older versions are migrated.
func (f *File) Load(nodeName string) (*Checkpoint, error) {
	data, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return New(nodeName), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	return Decode(data)
}

// Decode parses any supported version of the checkpoint format.
func Decode(data []byte) (*Checkpoint, error) {
	var head struct {
		Version json.RawMessage `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, corrupt("not a JSON object: %v", err)
	}
	var cp *Checkpoint
	var err error
	switch string(head.Version) {
	case "1":
		cp, err = decodeV1(data)
	case "2":
		cp, err = decodeV2(data)
	default:
		return nil, corrupt("unsupported version %s", head.Version)
	}
	if err != nil {
		return nil, err
	}
	if err := check(cp); err != nil {
		return nil, err
	}
	return cp, nil
}

func decodeV2(data []byte) (*Checkpoint, error) {
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, corrupt("decode version 2: %v", err)
	}
	sum, err := checksum(env.Data)
	if err != nil {
		return nil, err
	}
	if sum != env.Checksum {
		return nil, corrupt("checksum mismatch: file says %q, content has %q", env.Checksum, sum)
	}
	var cp Checkpoint
	if err := json.Unmarshal(env.Data, &cp); err != nil {
		return nil, corrupt("decode version 2 data: %v", err)
	}
	return &cp, nil
}

func checksum(raw json.RawMessage) (string, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return "", corrupt("compact data: %v", err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// check rejects content that no correct writer produces.
func check(cp *Checkpoint) error {
	if cp.Claims == nil {
		cp.Claims = map[types.UID]*Claim{}
	}
	for uid, c := range cp.Claims {
		switch {
		case c == nil || c.UID != uid:
			return corrupt("claim entry %q does not match its key", uid)
		case c.State != StatePrepareStarted && c.State != StatePrepareCompleted:
			return corrupt("claim %q has unknown state %q", uid, c.State)
		}
	}
	return nil
}

// Encode returns the current version's file content.
func Encode(cp *Checkpoint) ([]byte, error) {
	data, err := json.Marshal(cp)
	if err != nil {
		return nil, fmt.Errorf("encode checkpoint: %w", err)
	}
	sum, err := checksum(data)
	if err != nil {
		return nil, err
	}
	out, err := json.MarshalIndent(envelope{Version: Version, Checksum: sum, Data: data}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode checkpoint: %w", err)
	}
	return append(out, '\n'), nil
}

// Save writes cp atomically in the current version. For a File created
// with sync, the new content survives a power loss once Save returns
// (temporary file fsync, rename, directory fsync).
func (f *File) Save(cp *Checkpoint) error {
	data, err := Encode(cp)
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(f.path, data, 0o600, f.sync, nil); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	return nil
}

// MoveAside renames the file to <path>.corrupt-<UTC timestamp> and returns
// the new path. The file is kept for post-mortems.
func (f *File) MoveAside(now time.Time) (string, error) {
	to := f.path + corruptSuffix + now.UTC().Format("20060102T150405.000000000Z")
	if err := os.Rename(f.path, to); err != nil {
		return "", fmt.Errorf("move corrupted checkpoint aside: %w", err)
	}
	if f.sync {
		if err := fsutil.SyncDir(filepath.Dir(f.path)); err != nil {
			return to, err
		}
	}
	return to, nil
}

// RemoveStaleTemps removes temporary files left by a crash during Save.
func (f *File) RemoveStaleTemps() ([]string, error) {
	return fsutil.RemoveStaleTemps(filepath.Dir(f.path), filepath.Base(f.path))
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}
