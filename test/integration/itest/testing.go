package itest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Must fails the test (or benchmark) when err is set, saying what failed.
func Must(tb testing.TB, what string, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatalf("%s: %v", what, err)
	}
}

// Poll waits until cond returns nil, and fails the test with its last error.
func Poll(t *testing.T, what string, timeout time.Duration, cond func(context.Context) error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		err := cond(ctx)
		if err == nil || last == nil || !nearDeadline(ctx, err) {
			last = err // keep the last real answer over the deadline's
		}
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: %v (last: %v)", what, err, last)
	}
}

// nearDeadline: err is the poll's deadline speaking (the context's, or
// client-go's rate limiter refusing to wait past it), not the condition.
func nearDeadline(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "would exceed context deadline")
}
