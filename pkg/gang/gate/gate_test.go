package gate

import (
	"errors"
	"testing"
)

func TestCheck(t *testing.T) {
	errStop, errLease, errCrash := errors.New("stopped"), errors.New("lease"), errors.New("crash")
	for _, tc := range []struct {
		name     string
		gate     Gate
		wantIs   []error
		wantStop bool
	}{
		{name: "zero gate lets through"},
		{name: "stopped", gate: Gate{Stopped: func() error { return errStop }}, wantIs: []error{errStop}},
		{name: "fenced", gate: Gate{Fence: func() error { return errLease }}, wantIs: []error{ErrFenced, errLease}, wantStop: true},
		{name: "hook aborts", gate: Gate{Hook: func(Step, string) error { return errCrash }}, wantIs: []error{ErrAborted, errCrash}, wantStop: true},
		{name: "stopped before fence", gate: Gate{Stopped: func() error { return errStop }, Fence: func() error { return errLease }}, wantIs: []error{errStop}},
		{name: "fence before hook", gate: Gate{Fence: func() error { return errLease }, Hook: func(Step, string) error { return errCrash }}, wantIs: []error{ErrFenced}, wantStop: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.gate.Check(StepBind, "ns/p")
			if len(tc.wantIs) == 0 && err != nil {
				t.Fatalf("Check: %v, want nil", err)
			}
			for _, want := range tc.wantIs {
				if !errors.Is(err, want) {
					t.Errorf("Check: %v, want it to wrap %v", err, want)
				}
			}
			if got := Stops(err); got != tc.wantStop {
				t.Errorf("Stops(%v) = %v, want %v", err, got, tc.wantStop)
			}
		})
	}
}

func TestHookSeesStepAndObject(t *testing.T) {
	var gotStep Step
	var gotObject string
	g := Gate{Hook: func(s Step, o string) error { gotStep, gotObject = s, o; return nil }}
	if err := g.Check(StepClaimStatus, "ns/claim"); err != nil {
		t.Fatal(err)
	}
	if gotStep != StepClaimStatus || gotObject != "ns/claim" {
		t.Errorf("hook saw (%q, %q), want (%q, %q)", gotStep, gotObject, StepClaimStatus, "ns/claim")
	}
}
