package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/claims/checkpoint"
)

// lockPollInterval is how often a blocked file lock is retried.
const lockPollInterval = 2 * time.Millisecond

// fileStamp identifies one version of the checkpoint file. Every Save
// renames a new file into place, so the inode changes with each write.
type fileStamp struct {
	exists bool
	ino    uint64
	size   int64
	mtime  int64
}

func statStamp(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fileStamp{}, nil
	}
	if err != nil {
		return fileStamp{}, fmt.Errorf("stat checkpoint: %w", err)
	}
	s := fileStamp{exists: true, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ino = st.Ino
	}
	return s, nil
}

// session is one locked read-modify-write cycle of the node state.
type session struct {
	d  *Driver
	cp *checkpoint.Checkpoint
}

// begin locks the state and loads the checkpoint (recovering what another
// instance left half done, or rebuilding a corrupted file). The returned
// function unlocks; call it exactly once.
func (d *Driver) begin(ctx context.Context) (*session, func(), error) {
	d.mu.Lock()
	if err := d.flock(ctx); err != nil {
		d.mu.Unlock()
		return nil, nil, fmt.Errorf("%w: lock: %w", ErrCheckpoint, err)
	}
	release := func() {
		_ = unlock(d.lock)
		d.mu.Unlock()
	}
	s := &session{d: d}
	if err := s.load(ctx, false); err != nil {
		release()
		return nil, nil, err
	}
	return s, release, nil
}

// flock takes the cross-process lock, giving up when ctx is done.
func (d *Driver) flock(ctx context.Context) error {
	for {
		err := syscall.Flock(int(d.lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return err
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(lockPollInterval):
		}
	}
}

func unlock(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }

// load reads the checkpoint unless the cached copy is current. A fresh read
// runs recovery (startup adds the checks only needed once per process).
func (s *session) load(ctx context.Context, startup bool) error {
	d := s.d
	stamp, err := statStamp(d.file.Path())
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	if !startup && d.cached != nil && stamp == d.stamp {
		s.cp = d.cached
		return nil
	}
	d.cached = nil
	cp, err := d.file.Load(d.cfg.NodeName)
	dirty := false
	if errors.Is(err, checkpoint.ErrCorrupt) {
		cp, err = d.replaceCorrupt(ctx, err)
		dirty = true
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	s.cp = cp
	if d.recover(ctx, cp, startup) {
		dirty = true
	}
	if dirty {
		return s.save(ctx)
	}
	d.cached, d.stamp = cp, stamp
	return nil
}

// save writes the checkpoint durably. On failure the cache is dropped, so
// the next call re-reads (and recovers from) what is on disk.
func (s *session) save(ctx context.Context) error {
	d := s.d
	d.cached = nil
	if err := d.file.Save(s.cp); err != nil {
		klog.FromContext(ctx).Error(err, "Cannot write the checkpoint", "path", d.file.Path())
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	d.metrics.observeState(s.cp)
	stamp, err := statStamp(d.file.Path())
	if err != nil {
		return nil // written; the next call simply re-reads it
	}
	d.cached, d.stamp = s.cp, stamp
	return nil
}
