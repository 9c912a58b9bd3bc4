package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"
)

func TestDispatch(t *testing.T) {
	fabric := "../../test/gpu-mock/fabrics/hgx-h100x8.yaml"
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
