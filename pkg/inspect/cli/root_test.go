package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// run executes the command with args and returns stdout and the error.
func run(t *testing.T, cfg Config, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cfg.Streams = genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	cmd := NewCommand(cfg)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(t.Context())
	return out.String(), err
}

func TestCommandLine(t *testing.T) {
	// A kubeconfig that points nowhere: these cases must not need a server.
	nowhere := []string{"--kubeconfig=/nonexistent/kubeconfig"}
	tests := []struct {
		name    string
		args    []string
		want    []string // substrings of stdout
		wantErr string
	}{
		{name: "help as a kubectl plugin", args: []string{"--help"},
			want: []string{"kubectl gpufabric [command]", "status", "explain", "nodes", "snapshot", "fit", "--kubeconfig", "--context", "--namespace", "--topology-levels"}},
		{name: "subcommand help", args: []string{"explain", "--help"},
			want: []string{"kubectl gpufabric explain [podgroup | KIND/NAME] [flags]", "job/llm-train", "--all-namespaces", "--events"}},
		{name: "version", args: []string{"version"}, want: []string{"kubectl-gpufabric v9.9.9 ("}},
		{name: "version flag", args: []string{"--version"}, want: []string{"v9.9.9"}},
		{name: "bad output", args: append([]string{"status", "-o", "wide"}, nowhere...), wantErr: `--output "wide": want one of table, json, yaml`},
		{name: "bad color", args: append([]string{"nodes", "--color=sometimes"}, nowhere...), wantErr: `--color "sometimes"`},
		{name: "-A with a name", args: append([]string{"explain", "-A", "train"}, nowhere...), wantErr: "--all-namespaces needs no name"},
		{name: "too many names", args: []string{"explain", "a", "b"}, wantErr: "accepts at most 1 arg"},
		{name: "fit needs a size", args: append([]string{"fit", "--pods", "16"}, nowhere...), wantErr: "--gpus-per-pod 0 must both be at least 1"},
		{name: "status takes no name", args: []string{"status", "x"}, wantErr: "unknown command"},
		{name: "no kubeconfig reaches the loader", args: append([]string{"nodes"}, nowhere...), wantErr: "load kubeconfig"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(t, Config{Version: "v9.9.9"}, tc.args...)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestVersionJSON(t *testing.T) {
	out, err := run(t, Config{Version: "v1.2.3"}, "version", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var v versionInfo
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Version != "v1.2.3" || v.Platform == "" {
		t.Errorf("version json %q: %+v, %v", out, v, err)
	}
}

// TestDefaults: --topology-levels defaults to $GPUFABRIC_TOPOLOGY_LEVELS
// and is split like the scheduler's flag; status's --scheduler-namespace
// to $GPUFABRIC_SCHEDULER_NAMESPACE, else gpufabric-system; --color=auto
// follows the terminal check.
func TestDefaults(t *testing.T) {
	env := map[string]string{EnvTopologyLevels: " topology.gpufabric.dev/rack, ,topology.gpufabric.dev/ib-leaf"}
	cfg := withDefaults(Config{Getenv: func(k string) string { return env[k] }})
	cmd := NewCommand(cfg)
	if got := cmd.PersistentFlags().Lookup("topology-levels").DefValue; got != env[EnvTopologyLevels] {
		t.Errorf("--topology-levels default %q, want the environment's", got)
	}
	for envNS, want := range map[string]string{"": DefaultSchedulerNamespace, "ops": "ops"} {
		env[EnvSchedulerNamespace] = envNS
		status, _, err := NewCommand(cfg).Find([]string{"status"})
		if err != nil {
			t.Fatal(err)
		}
		if got := status.Flags().Lookup("scheduler-namespace").DefValue; got != want {
			t.Errorf("status --scheduler-namespace default with $%s=%q: %q, want %q", EnvSchedulerNamespace, envNS, got, want)
		}
	}
	o := &options{cfg: cfg, levels: env[EnvTopologyLevels], color: colorAuto}
	if got := strings.Join(o.reportOptions().Levels, ","); got != "topology.gpufabric.dev/rack,topology.gpufabric.dev/ib-leaf" {
		t.Errorf("levels %q", got)
	}
	for _, tc := range []struct {
		color    string
		terminal bool
		want     bool
	}{{colorAuto, true, true}, {colorAuto, false, false}, {colorAlways, false, true}, {colorNever, true, false}} {
		o.color = tc.color
		o.cfg.IsTerminal = func(io.Writer) bool { return tc.terminal }
		if got := o.style().Color; got != tc.want {
			t.Errorf("--color=%s on a terminal %v: colour %v, want %v", tc.color, tc.terminal, got, tc.want)
		}
	}
}
