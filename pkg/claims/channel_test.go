package claims

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

func TestDomainKindOf(t *testing.T) {
	for id, want := range map[string]topology.DomainKind{
		topology.MNNVLDomainID("0F2C1F6A-0000-4000-8000-000000000001", 7): topology.DomainKindMNNVL,
		topology.NodeDomainID(topology.DomainKindNVSwitch, "node-a"):      topology.DomainKindNVSwitch,
		topology.NodeDomainID(topology.DomainKindNone, "node-a"):          topology.DomainKindNone,
	} {
		if got := DomainKindOf(id); got != want {
			t.Errorf("DomainKindOf(%q) = %q, want %q", id, got, want)
		}
	}
}

func TestFabricChannelResolver(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "dev/nvidia-caps-imex-channels"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, IMEXChannelPath(3)), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	mnnvl := topology.MNNVLDomainID("0f2c1f6a-0000-4000-8000-000000000001", 7)
	nvsw := topology.NodeDomainID(topology.DomainKindNVSwitch, "node-a")
	tests := []struct {
		name    string
		r       FabricChannelResolver
		domain  string
		channel int
		want    Edits
		wantErr error
	}{
		{
			name: "mnnvl with imex node", r: FabricChannelResolver{LocalDomainID: mnnvl, DevRoot: root},
			domain: mnnvl, channel: 3,
			want: Edits{
				Env: []string{
					"GPUFABRIC_FABRIC_DOMAIN=" + mnnvl, "GPUFABRIC_FABRIC_DOMAIN_KIND=mnnvl",
					"GPUFABRIC_FABRIC_CHANNEL=3", "NCCL_MNNVL_ENABLE=1", "NCCL_NVLS_ENABLE=1",
				},
				DeviceNodes: []DeviceNode{{Path: IMEXChannelPath(3), HostPath: IMEXChannelPath(3)}},
			},
		},
		{
			name: "nvswitch without imex node", r: FabricChannelResolver{DevRoot: root},
			domain: nvsw, channel: 1,
			want: Edits{Env: []string{
				"GPUFABRIC_FABRIC_DOMAIN=" + nvsw, "GPUFABRIC_FABRIC_DOMAIN_KIND=nvswitch",
				"GPUFABRIC_FABRIC_CHANNEL=1", "NCCL_NVLS_ENABLE=1",
			}},
		},
		{
			name: "other domain", r: FabricChannelResolver{LocalDomainID: nvsw, DevRoot: root},
			domain: mnnvl, channel: 0, wantErr: ErrWrongDomain,
		},
		{name: "empty domain", domain: "", channel: 0, wantErr: ErrUnknownDevice},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.r.ChannelEdits(tc.domain, tc.channel)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error = %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("edits (-want +got):\n%s", diff)
			}
		})
	}
}
