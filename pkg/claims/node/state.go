package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/gpufabric/gpufabric/pkg/claims/checkpoint"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
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

// recoverAtStart runs the start-up recovery under the state lock: stale
// temporary files are removed, the checkpoint is loaded (corruption is
// handled), Started entries are redone or rolled back, everything is redone
// after a reboot, missing spec files are rewritten and spec files without a
// checkpoint entry are removed.
func (d *Driver) recoverAtStart(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.flock(ctx); err != nil {
		return fmt.Errorf("lock state: %w", err)
	}
	defer func() { _ = unlock(d.lock) }()
	for _, clean := range []func() ([]string, error){d.file.RemoveStaleTemps, d.specs.RemoveStaleTemps} {
		removed, err := clean()
		if err != nil {
			logger.Error(err, "Cannot remove stale temporary files")
		}
		if len(removed) > 0 {
			logger.Info("Removed temporary files left by a crash", "files", removed)
		}
	}
	s := &session{d: d}
	if err := s.load(ctx, true); err != nil {
		return fmt.Errorf("recover node state: %w", err)
	}
	d.metrics.observeState(s.cp)
	logger.Info("Node claim state recovered", "claims", len(s.cp.Claims), "bootID", d.bootID)
	return nil
}

// replaceCorrupt moves a corrupted checkpoint aside, reports it, and
// rebuilds the state from the CDI specs on disk.
func (d *Driver) replaceCorrupt(ctx context.Context, cause error) (*checkpoint.Checkpoint, error) {
	logger := klog.FromContext(ctx)
	d.metrics.corruptions.Inc()
	moved, err := d.file.MoveAside(d.cfg.Now())
	if err != nil {
		return nil, err
	}
	logger.Error(cause, "Checkpoint is corrupt, moved it aside and rebuilding from CDI specs", "movedTo", moved)
	cp := d.rebuild(ctx)
	d.emit(ctx, Event{
		Type:   "Warning",
		Reason: ReasonCheckpointCorrupt,
		Message: fmt.Sprintf("checkpoint %s is corrupt (%v); moved to %s, rebuilt %d claims from CDI specs",
			d.file.Path(), cause, moved, len(cp.Claims)),
	})
	return cp, nil
}

// rebuild reads this driver's CDI specs into a checkpoint. The entries have
// no boot id, so recovery redoes them (re-resolving their devices). With a
// ClaimGetter, claims that no longer exist (or were replaced or
// deallocated) are dropped and their specs removed.
func (d *Driver) rebuild(ctx context.Context) *checkpoint.Checkpoint {
	logger := klog.FromContext(ctx)
	cp := checkpoint.New(d.cfg.NodeName)
	found, err := d.specs.List()
	if err != nil {
		logger.Error(err, "Cannot list CDI specs, starting with an empty state")
		return cp
	}
	for _, f := range found {
		if f.Err != nil {
			logger.Error(f.Err, "Ignoring unreadable CDI spec", "path", f.Path)
			continue
		}
		f.Claim.BootID = ""
		cp.Claims[f.UID] = f.Claim
	}
	if d.cfg.ClaimGetter == nil {
		return cp
	}
	for _, uid := range slices.Sorted(maps.Keys(cp.Claims)) {
		c := cp.Claims[uid]
		if why := d.staleReason(ctx, c); why != "" {
			d.drop(ctx, cp, c, ReasonStaleClaimRemoved, why)
		}
	}
	return cp
}

// staleReason asks the API whether the claim is still allocated; "" means
// keep it (also when the API cannot answer).
func (d *Driver) staleReason(ctx context.Context, c *checkpoint.Claim) string {
	claim, err := d.cfg.ClaimGetter.GetClaim(ctx, c.Namespace, c.Name)
	switch {
	case apierrors.IsNotFound(err):
		return "claim no longer exists"
	case err != nil:
		klog.FromContext(ctx).Error(err, "Cannot check claim, keeping it", "claim", klog.KRef(c.Namespace, c.Name))
		return ""
	case claim.UID != c.UID:
		return fmt.Sprintf("claim was replaced (now uid %s)", claim.UID)
	case claim.Status.Allocation == nil:
		return "claim is no longer allocated"
	}
	return ""
}

// recover redoes (or, failing that, rolls back) claims whose preparation is
// not known to be complete in this boot. It reports whether cp changed.
func (d *Driver) recover(ctx context.Context, cp *checkpoint.Checkpoint, startup bool) bool {
	dirty := false
	for _, uid := range slices.Sorted(maps.Keys(cp.Claims)) {
		c := cp.Claims[uid]
		why := d.redoReason(c, startup)
		if why == "" {
			continue
		}
		dirty = true
		if err := d.redo(ctx, c); err != nil {
			d.drop(ctx, cp, c, ReasonClaimRolledBack, fmt.Sprintf("%s, and redoing failed: %v", why, err))
			d.metrics.recovered.WithLabelValues("rolled_back").Inc()
			continue
		}
		d.metrics.recovered.WithLabelValues("redone").Inc()
		klog.FromContext(ctx).Info("Redid claim preparation", "claim", klog.KRef(c.Namespace, c.Name), "uid", uid, "reason", why)
		d.emit(ctx, Event{Type: "Normal", Reason: ReasonClaimRedone, Message: why, Claim: ref(c)})
	}
	if startup {
		d.removeOrphans(ctx, cp)
	}
	return dirty
}

func (d *Driver) redoReason(c *checkpoint.Claim, startup bool) string {
	switch {
	case c.State == checkpoint.StatePrepareStarted:
		return "preparation was interrupted"
	case c.BootID == "":
		return "boot id unknown (migrated or rebuilt entry)"
	case c.BootID != d.bootID:
		return "node rebooted since preparation"
	case startup:
		if ok, err := d.specs.Exists(c.UID); err == nil && !ok {
			return "cdi spec file is missing"
		}
	}
	return ""
}

// redo repeats a claim's side effects from its checkpoint entry (making
// its on-demand devices again, or finding them).
func (d *Driver) redo(ctx context.Context, c *checkpoint.Claim) error {
	if err := d.writeSpec(ctx, c); err != nil {
		return err
	}
	c.State, c.BootID, c.UpdatedAt = checkpoint.StatePrepareCompleted, d.bootID, d.cfg.Now().UTC()
	return nil
}

// drop removes a claim's on-demand devices, spec and checkpoint entry and
// reports why.
func (d *Driver) drop(ctx context.Context, cp *checkpoint.Checkpoint, c *checkpoint.Claim, reason, why string) {
	logger := klog.FromContext(ctx)
	_ = d.undoOnDemand(ctx, c) // logged; a leftover instance is the operator's to see

	if err := d.specs.Remove(c.UID); err != nil {
		logger.Error(err, "Cannot remove CDI spec", "claim", klog.KRef(c.Namespace, c.Name))
	}
	delete(cp.Claims, c.UID)
	logger.Info("Dropped claim from node state", "claim", klog.KRef(c.Namespace, c.Name), "uid", c.UID, "reason", reason, "details", why)
	d.emit(ctx, Event{Type: "Warning", Reason: reason, Message: why, Claim: ref(c)})
}

// removeOrphans removes this driver's spec files that have no checkpoint
// entry (only a crash between removing an entry and its file leaves one).
func (d *Driver) removeOrphans(ctx context.Context, cp *checkpoint.Checkpoint) {
	logger := klog.FromContext(ctx)
	found, err := d.specs.List()
	if err != nil {
		logger.Error(err, "Cannot list CDI specs")
		return
	}
	for _, f := range found {
		if _, ok := cp.Claims[f.UID]; ok {
			continue
		}
		if err := d.specs.Remove(f.UID); err != nil {
			logger.Error(err, "Cannot remove orphaned CDI spec", "path", f.Path)
			continue
		}
		logger.Info("Removed CDI spec without checkpoint entry", "path", f.Path)
	}
}

func ref(c *checkpoint.Claim) *kubeletplugin.NamespacedObject {
	return &kubeletplugin.NamespacedObject{
		NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name},
		UID:            c.UID,
	}
}
