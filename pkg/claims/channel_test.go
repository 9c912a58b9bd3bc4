package claims

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

var (
	testMNNVL = topology.MNNVLDomainID("0f2c1f6a-0000-4000-8000-000000000001", 7)
	testNVSw  = topology.NodeDomainID(topology.DomainKindNVSwitch, "node-a")
)

func readyIMEX() *IMEX {
	return &IMEX{Major: 511, Channels: 2048, Ready: func(context.Context) (bool, string, error) { return true, "READY", nil }}
}

func TestFabricChannelResolver(t *testing.T) {
	base := func(domain, kind, channel string) []string {
		return []string{"GPUFABRIC_FABRIC_DOMAIN=" + domain, "GPUFABRIC_FABRIC_DOMAIN_KIND=" + kind, "GPUFABRIC_FABRIC_CHANNEL=" + channel}
	}
	tests := []struct {
		name    string
		r       FabricChannelResolver
		domain  string
		channel int
		want    Edits
		wantErr error
	}{
		{
			name: "mnnvl with imex: a channel device the runtime creates", r: FabricChannelResolver{LocalDomainID: testMNNVL, IMEX: readyIMEX()},
			domain: testMNNVL, channel: 3,
			want: Edits{
				Env:         append(base(testMNNVL, "mnnvl", "3"), "GPUFABRIC_IMEX_CHANNEL=3", "NCCL_MNNVL_ENABLE=1", "NCCL_NVLS_ENABLE=1"),
				DeviceNodes: []DeviceNode{{Path: "/dev/nvidia-caps-imex-channels/channel3", Type: "c", Major: 511, Minor: 3, FileMode: 0o666}},
			},
		},
		{
			name: "mnnvl without imex (left to ComputeDomain): no channel, no MNNVL", r: FabricChannelResolver{LocalDomainID: testMNNVL},
			domain: testMNNVL, channel: 3,
			want: Edits{Env: base(testMNNVL, "mnnvl", "3")},
		},
		{
			name: "mnnvl, driver without imex", r: FabricChannelResolver{IMEX: &IMEX{Channels: 2048}},
			domain: testMNNVL, channel: 0, wantErr: ErrIMEXUnavailable,
		},
		{
			name: "mnnvl, channel beyond the driver's count", r: FabricChannelResolver{IMEX: &IMEX{Major: 511, Channels: 16}},
			domain: testMNNVL, channel: 16, wantErr: ErrIMEXUnavailable,
		},
		{
			name: "nvswitch ignores imex", r: FabricChannelResolver{IMEX: readyIMEX()},
			domain: testNVSw, channel: 1,
			want: Edits{Env: append(base(testNVSw, "nvswitch", "1"), "NCCL_NVLS_ENABLE=1")},
		},
		{
			name: "other domain", r: FabricChannelResolver{LocalDomainID: testNVSw},
			domain: testMNNVL, channel: 0, wantErr: ErrWrongDomain,
		},
		{name: "empty domain", domain: "", channel: 0, wantErr: ErrUnknownDevice},
		{name: "negative channel", domain: testMNNVL, channel: -1, wantErr: ErrUnknownDevice},
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

// TestWaitReady checks the bounded wait for the IMEX daemon: it returns
// once the daemon answers READY, fails after the timeout with the last
// answer, and does not ask at all where no IMEX channel is needed.
func TestWaitReady(t *testing.T) {
	tests := []struct {
		name       string
		domain     string
		noIMEX     bool
		answers    []string // then the last one forever; "error" fails the probe
		wantErr    error
		wantInErr  string
		wantAsked  int32 // at least
		wantAtMost int32
	}{
		{name: "ready at once", domain: testMNNVL, answers: []string{"READY"}, wantAsked: 1, wantAtMost: 1},
		{name: "ready on the third answer", domain: testMNNVL, answers: []string{"NOT_READY", "error", "READY"}, wantAsked: 3, wantAtMost: 3},
		{name: "never ready", domain: testMNNVL, answers: []string{"NOT_READY"}, wantErr: ErrIMEXNotReady, wantInErr: "after 100ms (last answer: NOT_READY)", wantAsked: 2, wantAtMost: 100},
		{name: "no daemon", domain: testMNNVL, answers: []string{"error"}, wantErr: ErrIMEXNotReady, wantInErr: "no daemon answers", wantAsked: 2, wantAtMost: 100},
		{name: "nvswitch needs no daemon", domain: testNVSw, answers: []string{"NOT_READY"}},
		{name: "imex left to another component", domain: testMNNVL, noIMEX: true, answers: []string{"NOT_READY"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var asked atomic.Int32
			x := &IMEX{Major: 511, Channels: 8, ReadyTimeout: 100 * time.Millisecond, PollInterval: 5 * time.Millisecond,
				Ready: func(context.Context) (bool, string, error) {
					i := int(asked.Add(1)) - 1
					a := tc.answers[min(i, len(tc.answers)-1)]
					if a == "error" {
						return false, "", errors.New("nvidia-imex-ctl: no daemon answers")
					}
					return a == "READY", a, nil
				}}
			r := FabricChannelResolver{IMEX: x}
			if tc.noIMEX {
				r.IMEX = nil
			}
			err := r.WaitReady(t.Context(), tc.domain)
			if !errors.Is(err, tc.wantErr) || (tc.wantInErr != "" && !strings.Contains(err.Error(), tc.wantInErr)) {
				t.Fatalf("error = %v, want %v containing %q", err, tc.wantErr, tc.wantInErr)
			}
			if n := asked.Load(); n < tc.wantAsked || n > tc.wantAtMost {
				t.Errorf("daemon asked %d times, want %d..%d", n, tc.wantAsked, tc.wantAtMost)
			}
		})
	}
}

// TestWaitReadyStopsWithContext: a cancelled prepare does not wait out the
// timeout.
func TestWaitReadyStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	x := &IMEX{Major: 511, Channels: 8, ReadyTimeout: time.Hour, Ready: func(context.Context) (bool, string, error) {
		cancel()
		return false, "NOT_READY", nil
	}}
	err := FabricChannelResolver{IMEX: x}.WaitReady(ctx, testMNNVL)
	if !errors.Is(err, ErrIMEXNotReady) || !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v, want ErrIMEXNotReady and context.Canceled", err)
	}
}
