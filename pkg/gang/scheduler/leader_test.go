package scheduler

import (
	"context"
	"errors"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"k8s.io/client-go/kubernetes/fake"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// fakeLock is a resourcelock.Interface whose writes return err.
type fakeLock struct {
	resourcelock.Interface
	err error
}

func (l *fakeLock) Create(context.Context, resourcelock.LeaderElectionRecord) error { return l.err }
func (l *fakeLock) Update(context.Context, resourcelock.LeaderElectionRecord) error { return l.err }
func (l *fakeLock) Identity() string                                                { return "me" }

// TestObservedLockFence: writes are allowed only within the renew deadline
// of this replica's last successful acquisition or renewal; a failed
// renewal does not extend it, a release ends it at once.
func TestObservedLockFence(t *testing.T) {
	const deadline = 50 * time.Millisecond
	inner := &fakeLock{}
	l := &observedLock{Interface: inner}
	ctx := t.Context()
	mine := resourcelock.LeaderElectionRecord{HolderIdentity: "me"}
	steps := []struct {
		name string
		do   func()
		want string // "" = may write
	}{
		{"never acquired", func() {}, "not held"},
		{"acquired", func() { _ = l.Create(ctx, mine) }, ""},
		{"past the deadline", func() { time.Sleep(deadline + 10*time.Millisecond) }, "renew deadline is 50ms"},
		{"renewal fails", func() { inner.err = errors.New("conflict"); _ = l.Update(ctx, mine) }, "renew deadline"},
		{"renewed", func() { inner.err = nil; _ = l.Update(ctx, mine) }, ""},
		{"released", func() { _ = l.Update(ctx, resourcelock.LeaderElectionRecord{}) }, "not held"},
	}
	for _, s := range steps {
		s.do()
		err := l.renewedWithin(deadline)
		if (s.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), s.want) {
			t.Errorf("%s: fence %v, want %q", s.name, err, s.want)
		}
	}
}

// TestStepFenced: a fenced scheduler refuses every write with gate.ErrFenced
// before the commit hook runs.
func TestStepFenced(t *testing.T) {
	hooked := false
	s, err := New(Config{
		Client:          fake.NewClientset(),
		RecordNamespace: "gpufabric",
		Fence:           func() error { return errors.New("lease lost") },
		CommitHook:      func(gate.Step, string) error { hooked = true; return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.gate.Check(gate.StepBind, "ns/p")
	if !errors.Is(err, gate.ErrFenced) || !gate.Stops(err) || hooked {
		t.Errorf("step: %v (stops %v), hook ran %v; want gate.ErrFenced before the hook", err, gate.Stops(err), hooked)
	}
}
