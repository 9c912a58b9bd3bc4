package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"
)

func TestDispatch(t *testing.T) {
	fabric := "../../pkg/devices/mock/fabrics/hgx-h100x8.yaml"
	tests := map[string]struct {
		args     []string
		wantCode int
		wantOut  []string
		wantErr  string
	}{
		"no args":            {args: nil, wantCode: 2, wantErr: "Subcommands:"},
		"help":               {args: []string{"help"}, wantCode: 0, wantErr: "discover"},
		"unknown subcommand": {args: []string{"run-away"}, wantCode: 2, wantErr: `unknown subcommand "run-away"`},
		"discover without node": {
			args: []string{"discover", "--mock-fabric", fabric}, wantCode: 2, wantErr: "--node is required",
		},
		"discover unknown node": {
			args: []string{"discover", "--mock-fabric", fabric, "--node", "nope"}, wantCode: 1, wantErr: "node nope: not in the fabric",
		},
		"discover mock needs fabric": {
			args: []string{"discover", "--backend", "mock", "--node", "n"}, wantCode: 2, wantErr: "needs --mock-fabric",
		},
		"run with an unknown imex mode": {
			args: []string{"run", "--node", "n", "--imex-channels", "sometimes"}, wantCode: 2, wantErr: "--imex-channels must be managed or off",
		},
		"run with a zero imex wait": {
			args: []string{"run", "--node", "n", "--imex-ready-timeout", "0s"}, wantCode: 2, wantErr: "--imex-ready-timeout must be positive",
		},
		"run with no imex command": {
			args: []string{"run", "--node", "n", "--imex-ctl", " "}, wantCode: 2, wantErr: "--imex-ctl must name a command",
		},
		"run with an unknown taint effect": {
			args: []string{"run", "--node", "n", "--fatal-taint-effect", "Evict"}, wantCode: 2, wantErr: "--fatal-taint-effect must be NoExecute or NoSchedule",
		},
		"run with a bad xid list": {
			args: []string{"run", "--node", "n", "--fatal-xids", "79,x"}, wantCode: 2, wantErr: `--fatal-xids: xid "x"`,
		},
		"run with an xid both fatal and ignored": {
			args: []string{"run", "--node", "n", "--ignored-xids", "13,79"}, wantCode: 2, wantErr: "xid 79 is both fatal and ignored",
		},
		"run with a negative fabric error threshold": {
			args: []string{"run", "--node", "n", "--fabric-error-threshold", "-1"}, wantCode: 2, wantErr: "--fabric-error-threshold must be 0 (off) or more",
		},
		"run with a fabric error window past a day": {
			args: []string{"run", "--node", "n", "--fabric-error-window", "25h"}, wantCode: 2, wantErr: "--fabric-error-window must be 1s..24h",
		},
		"run with a certificate and no key": {
			args: []string{"run", "--node", "n", "--tls-cert-file", "/tls/tls.crt"}, wantCode: 2, wantErr: "--tls-cert-file and --tls-private-key-file go together",
		},
		"run with profiling neither on nor off": {
			args: []string{"run", "--node", "n", "--profiling", "maybe"}, wantCode: 2, wantErr: "--profiling must be true or false",
		},
		"run with profiling and no metrics port": {
			args: []string{"run", "--node", "n", "--profiling", "true"}, wantCode: 2, wantErr: "--profiling needs --metrics-address",
		},
		"discover mock node": {
			args:     []string{"discover", "--mock-fabric", fabric, "--node", "h100-n03"},
			wantCode: 0,
			wantOut:  []string{"kind: ResourceSlice", "name: h100-n03-gpufabric.dev-0-0", "name: gpu-7", "name: nic-mlx5-7", "string: nvswitch.h100-n03"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			var stdout, stderr bytes.Buffer
			args := tc.args
			if len(args) > 0 && args[0] == "discover" && strings.Contains(strings.Join(args, " "), "--mock-fabric") {
				args = append(args, "--mock-dir", t.TempDir())
			}
			code := dispatch(ctx, args, &stdout, &stderr)
			if diff := cmp.Diff(tc.wantCode, code); diff != "" {
				t.Errorf("exit code (-want +got):\n%s\nstderr: %s", diff, stderr.String())
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("stdout lacks %q", w)
				}
			}
			if !strings.Contains(stderr.String(), tc.wantErr) {
				t.Errorf("stderr %q lacks %q", stderr.String(), tc.wantErr)
			}
		})
	}
}

// TestDiscoverStopsWhenCancelled runs the discover command with a context
// that is already done, as after SIGTERM: it fails at once with the
// context's error and prints no slices.
func TestDiscoverStopsWhenCancelled(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	var stdout, stderr bytes.Buffer
	start := time.Now()
	args := []string{"discover", "--mock-fabric", "../../pkg/devices/mock/fabrics/hgx-h100x8.yaml", "--node", "h100-n01", "--mock-dir", t.TempDir()}
	code := dispatch(ctx, args, &stdout, &stderr)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("discover took %v after cancellation", took)
	}
	if code != 1 || stdout.Len() > 0 || !strings.Contains(stderr.String(), "context canceled") {
		t.Errorf("exit code %d, stdout %q, stderr %q; want 1, nothing, a context error", code, stdout.String(), stderr.String())
	}
}
