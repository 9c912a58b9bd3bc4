// Command kubelet-plugin is gpufabric's node agent. It is a small
// subcommand dispatcher: each subcommand lives in its own file and
// registers itself in subcommands().
//
//	kubelet-plugin run --node N [--backend mock --mock-fabric F]   the DaemonSet's command
//	kubelet-plugin discover --mock-fabric F --node N                print a node's ResourceSlices
//	kubelet-plugin health list|clear [--gpu UUID]                  GPU event taints of this boot
//	kubelet-plugin --version                                       the build (also: version)
//
// Every subcommand takes component-base's logging flags
// (--logging-format=text|json, -v, --vmodule).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/component/logging"
	"github.com/gpufabric/gpufabric/pkg/component/version"
)

// subcommand is one verb of the binary.
type subcommand struct {
	name    string
	summary string
	// run parses args (without the subcommand name) and does the work.
	run func(ctx context.Context, args []string, stdout io.Writer) error
}

// subcommands lists every verb. Add a new one here and in its own file.
func subcommands() []subcommand {
	return []subcommand{
		{name: "run", summary: "run the kubelet plugin: publish this node's devices and prepare claims", run: runPlugin},
		{name: "discover", summary: "discover this node's GPUs and HCAs and print its ResourceSlices as YAML", run: runDiscover},
		{name: "health", summary: "list or clear the taints GPU events (Xid, ECC) left for this boot", run: runHealth},
	}
}

// errUsage marks errors caused by bad arguments (exit code 2).
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	klog.Flush()
	os.Exit(code)
}

// dispatch runs the subcommand named by args[0] and returns the exit code.
func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmds := subcommands()
	if len(args) > 0 && (args[0] == "version" || slices.ContainsFunc(args, version.IsVersionFlag)) {
		fmt.Fprint(stdout, version.Get().Line("kubelet-plugin"))
		return 0
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	i := slices.IndexFunc(cmds, func(c subcommand) bool { return c.name == args[0] })
	if i < 0 {
		fmt.Fprintf(stderr, "kubelet-plugin: unknown subcommand %q\n", args[0])
		usage(stderr, cmds)
		return 2
	}
	logger := klog.Background().WithName(cmds[i].name)
	ctx = klog.NewContext(ctx, logger)
	if err := cmds[i].run(ctx, args[1:], stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "kubelet-plugin %s: %v\n", cmds[i].name, err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	return 0
}

func usage(w io.Writer, cmds []subcommand) {
	var b strings.Builder
	b.WriteString("Usage: kubelet-plugin <subcommand> [flags]\n\nSubcommands:\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "  %-10s %s\n", c.name, c.summary)
	}
	b.WriteString("\nRun 'kubelet-plugin <subcommand> -h' for its flags; 'kubelet-plugin --version' prints the build.\n")
	fmt.Fprint(w, b.String())
}

// flagSet is a subcommand's flags with component-base's logging flags
// (--logging-format, -v, --vmodule; env GPUFABRIC_LOGGING_FORMAT); Parse
// applies them.
type flagSet struct {
	*flag.FlagSet
	logging *logging.Options
	err     error
}

func newFlagSet(name string, stderr io.Writer) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet("kubelet-plugin "+name, flag.ContinueOnError)}
	fs.SetOutput(stderr)
	fs.logging, fs.err = logging.AddFlags(fs.FlagSet, "GPUFABRIC_LOGGING_FORMAT", os.LookupEnv)
	return fs
}

// Parse parses args and applies the logging flags.
func (fs *flagSet) Parse(args []string) error {
	if fs.err != nil {
		return fmt.Errorf("%w: %v", errUsage, fs.err)
	}
	if err := fs.FlagSet.Parse(args); err != nil {
		return err
	}
	if err := fs.logging.Apply(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}
