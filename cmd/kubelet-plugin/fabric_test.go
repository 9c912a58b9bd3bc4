package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/devices"
	"github.com/gpufabric/gpufabric/pkg/devices/fabrichealth"
	"github.com/gpufabric/gpufabric/pkg/devices/mock"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

const fabricNode = "nodeGroups:\n- name: n1\n  gpus: {model: H100, count: 2}\n  nvlink: {kind: nvswitch}\n  hcas: {count: %d}\n"

// mockNode builds n1 of a fabric file (its faults as given) and discovers
// it.
func mockNode(ctx context.Context, t *testing.T, hcas int, faults string) (devices.Backend, *devices.Inventory) {
	t.Helper()
	f, err := mock.Parse("fabric.yaml", []byte(fmt.Sprintf(fabricNode, hcas)+faults))
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.Backend("n1", filepath.Join(t.TempDir(), "n1"))
	if err != nil {
		t.Fatal(err)
	}
	inv, err := devices.Discover(ctx, b, "n1")
	if err != nil {
		t.Fatal(err)
	}
	return b, inv
}

func fabricTaint(ts []resourceapi.DeviceTaint) string {
	for _, t := range ts {
		if t.Key == topology.TaintFabricErrors {
			return t.Value + ":" + string(t.Effect)
		}
	}
	return ""
}

func TestFabricHealthPublishes(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fh := newFabricHealth(fabrichealth.Config{Window: 10 * time.Minute, Threshold: 10})
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b, inv := mockNode(ctx, t, 2, "")
	if evs := fh.observe(ctx, b, inv, start); len(evs) != 0 {
		t.Errorf("baseline: events %v", evs)
	}
	sick := "faults:\n- node: n1\n  ibCounters: {rail: 1, counter: symbol_error, add: 20}\n- node: n1\n  nvlinkErrors: {gpu: 0, link: 2, counter: replay, add: 3}\n"
	b, inv = mockNode(ctx, t, 2, sick)
	evs := fh.observe(ctx, b, inv, start.Add(30*time.Second))
	if len(evs) != 1 || evs[0].Reason != reasonFabricErrors || !strings.Contains(evs[0].Message, "nic-mlx5-1: symbol_error rose by 20") {
		t.Errorf("events %v, want one naming nic-mlx5-1, symbol_error and 20", evs)
	}
	out, tainted := fh.apply(inv)
	if tainted != 1 {
		t.Errorf("%d tainted, want 1", tainted)
	}
	gpu0, _ := out.Device("gpu-0")
	_, nic1 := out.Device("nic-mlx5-1")
	_, nic0 := out.Device("nic-mlx5-0")
	if *gpu0.FabricErrors != 3 || fabricTaint(gpu0.Taints) != "" {
		t.Errorf("gpu-0: %d errors, taint %q; want 3 and none", *gpu0.FabricErrors, fabricTaint(gpu0.Taints))
	}
	if *nic1.FabricErrors != 20 || fabricTaint(nic1.Taints) != "symbol_error:NoSchedule" {
		t.Errorf("nic-mlx5-1: %d errors, taint %q; want 20 and symbol_error:NoSchedule", *nic1.FabricErrors, fabricTaint(nic1.Taints))
	}
	if *nic0.FabricErrors != 0 || len(nic0.Taints) != 0 {
		t.Errorf("nic-mlx5-0: %d errors, taints %v; want 0 and none", *nic0.FabricErrors, nic0.Taints)
	}
	if _, n := inv.Device("nic-mlx5-1"); n.FabricErrors != nil || len(n.Taints) != 0 {
		t.Error("apply changed the inventory it was given")
	}
	// Same counters 11 minutes on: the increases left the window.
	evs = fh.observe(ctx, b, inv, start.Add(11*time.Minute))
	if len(evs) != 1 || evs[0].Reason != reasonFabricErrorsCleared || !strings.Contains(evs[0].Message, "nic-mlx5-1") {
		t.Errorf("events %v, want nic-mlx5-1 cleared", evs)
	}
	if out, tainted = fh.apply(inv); tainted != 0 {
		t.Errorf("%d tainted after the window, want 0", tainted)
	}
	if _, n := out.Device("nic-mlx5-1"); *n.FabricErrors != 0 {
		t.Errorf("nic-mlx5-1: %d errors after the window, want 0", *n.FabricErrors)
	}
}

// TestFabricHealthEventsBounded: ten ports tainted at once give
// maxFabricEvents events and one that counts the other two.
func TestFabricHealthEventsBounded(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fh := newFabricHealth(fabrichealth.Config{Window: time.Minute, Threshold: 1})
	b, inv := mockNode(ctx, t, 10, "")
	fh.observe(ctx, b, inv, time.Now())
	var faults strings.Builder
	faults.WriteString("faults:\n")
	for r := range 10 {
		fmt.Fprintf(&faults, "- node: n1\n  ibCounters: {rail: %d, counter: link_downed, add: 1}\n", r)
	}
	b, inv = mockNode(ctx, t, 10, faults.String())
	evs := fh.observe(ctx, b, inv, time.Now())
	if len(evs) != maxFabricEvents+1 || !strings.Contains(evs[maxFabricEvents].Message, "2 more devices") {
		t.Errorf("%d events (last %v), want %d and a summary of 2 more", len(evs), evs[len(evs)-1], maxFabricEvents+1)
	}
}

// TestFabricFlagsEnvTwins: the fabric flags default from their env twins.
func TestFabricFlagsEnvTwins(t *testing.T) {
	t.Setenv("GPUFABRIC_FABRIC_ERROR_THRESHOLD", "25")
	t.Setenv("GPUFABRIC_FABRIC_ERROR_WINDOW", "90s")
	var o runOptions
	if err := o.flags([]string{"--node", "n"}); err != nil {
		t.Fatal(err)
	}
	if got := o.fabric.config(); got != (fabrichealth.Config{Window: 90 * time.Second, Threshold: 25}) {
		t.Errorf("fabric config %+v, want threshold 25 and window 90s from the environment", got)
	}
	t.Setenv("GPUFABRIC_FABRIC_ERROR_THRESHOLD", "ten")
	if err := (&runOptions{}).flags([]string{"--node", "n"}); err == nil || !strings.Contains(err.Error(), "GPUFABRIC_FABRIC_ERROR_THRESHOLD") {
		t.Errorf("bad threshold in the environment: %v", err)
	}
}
