// Package cli builds the cobra commands of `kubectl gpufabric`: flags in,
// a pkg/inspect report out. cmd/kubectl-gpufabric only runs NewCommand;
// tests run it in-process.
package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/inspect"
)

// EnvTopologyLevels is the environment default of --topology-levels, as
// for gpufabric-scheduler.
const EnvTopologyLevels = "GPUFABRIC_TOPOLOGY_LEVELS"

// EnvSchedulerNamespace is the environment default of status's
// --scheduler-namespace; DefaultSchedulerNamespace the default without it
// (the namespace the install docs use).
const (
	EnvSchedulerNamespace     = "GPUFABRIC_SCHEDULER_NAMESPACE"
	DefaultSchedulerNamespace = "gpufabric-system"
)

// Config is what the commands take from their process.
type Config struct {
	Streams genericiooptions.IOStreams
	// Version printed by `version`.
	Version string
	// Getenv reads the environment; nil: os.Getenv.
	Getenv func(string) string
	// Now is the time event ages are computed from; nil: time.Now.
	Now func() time.Time
	// IsTerminal reports whether w is a terminal (--color=auto); nil: a
	// check of *os.File.
	IsTerminal func(w io.Writer) bool
}

// options are the flags shared by the commands.
type options struct {
	cfg    Config
	flags  *genericclioptions.ConfigFlags
	levels string
	output string
	color  string
}

// Colour modes.
const (
	colorAuto   = "auto"
	colorAlways = "always"
	colorNever  = "never"
)

// NewCommand returns the root command with its subcommands.
func NewCommand(cfg Config) *cobra.Command {
	cfg = withDefaults(cfg)
	o := &options{cfg: cfg, flags: genericclioptions.NewConfigFlags(true)}
	root := &cobra.Command{
		Use:   "kubectl-gpufabric",
		Short: "See the GPU fabric as gpufabric-scheduler sees it",
		Long: `kubectl gpufabric shows the fabric that gpufabric-scheduler places gangs on:
occupancy per NVLink domain and per node-label level (status), where a
PodGroup or workload went or why it waits (explain), the GPUs, rails and
taints of each node (nodes), the cluster as a gpufabric-sim fabric file
(snapshot), and whether a gang would fit now (fit).`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl gpufabric"},
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       cfg.Version,
	}
	root.CompletionOptions.HiddenDefaultCmd = true
	root.SetIn(cfg.Streams.In)
	root.SetOut(cfg.Streams.Out)
	root.SetErr(cfg.Streams.ErrOut)
	pf := root.PersistentFlags()
	o.flags.AddFlags(pf)
	pf.StringVar(&o.levels, "topology-levels", cfg.Getenv(EnvTopologyLevels),
		"comma-separated node label keys of the fabric levels above the NVLink domain, innermost first (default $"+EnvTopologyLevels+")")
	pf.StringVarP(&o.output, "output", "o", inspect.FormatTable, "output format: "+strings.Join(inspect.Formats, "|"))
	pf.StringVar(&o.color, "color", colorAuto, "colour the occupancy bars: auto (when the output is a terminal), always, never")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	pf.AddGoFlag(klogFlags.Lookup("v"))
	root.AddCommand(newStatusCommand(o), newExplainCommand(o), newNodesCommand(o), newSnapshotCommand(o), newFitCommand(o), newVersionCommand(o))
	return root
}

func withDefaults(cfg Config) Config {
	if cfg.Getenv == nil {
		cfg.Getenv = os.Getenv
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.IsTerminal == nil {
		cfg.IsTerminal = func(w io.Writer) bool {
			f, ok := w.(*os.File)
			return ok && term.IsTerminal(int(f.Fd()))
		}
	}
	if cfg.Version == "" {
		cfg.Version = "(devel)"
	}
	return cfg
}

// check validates the shared flags.
func (o *options) check() error {
	if !slices.Contains(inspect.Formats, o.output) {
		return fmt.Errorf("--output %q: want one of %s", o.output, strings.Join(inspect.Formats, ", "))
	}
	if !slices.Contains([]string{colorAuto, colorAlways, colorNever}, o.color) {
		return fmt.Errorf("--color %q: want auto, always or never", o.color)
	}
	return nil
}

func (o *options) reportOptions() inspect.Options {
	var levels []string
	for _, l := range strings.Split(o.levels, ",") {
		if l = strings.TrimSpace(l); l != "" {
			levels = append(levels, l)
		}
	}
	return inspect.Options{Levels: levels}
}

func (o *options) style() inspect.Style {
	color := o.color == colorAlways || o.color == colorAuto && o.cfg.IsTerminal(o.cfg.Streams.Out)
	return inspect.Style{Color: color, Now: o.cfg.Now()}
}

// client builds a clientset from the kubeconfig flags.
func (o *options) client() (kubernetes.Interface, error) {
	rc, err := o.flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	rc.UserAgent = "kubectl-gpufabric/" + o.cfg.Version
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}
	return c, nil
}

// namespace is -n, else the kubeconfig context's namespace, else default.
func (o *options) namespace() (string, error) {
	ns, _, err := o.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("read namespace: %w", err)
	}
	return ns, nil
}

// load checks the options and lists what a report needs.
func (o *options) load(ctx context.Context, need inspect.Need) (*inspect.Cluster, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	c, err := o.client()
	if err != nil {
		return nil, err
	}
	return inspect.Load(ctx, c, need)
}
