// Package daemon starts gpufabric's long-running binaries
// (gpufabric-scheduler, gpufabric-grouper) the same way: their flags, each
// with an environment-variable twin (a flag given on the command line
// wins), --version, component-base's logging flags, a context cancelled on
// SIGINT and SIGTERM, a logger named for the binary, and the exit codes.
//
// Rules: exit 0 when Run returns nil, for -h and for --version; 2 for a
// bad flag, environment variable or option (nothing has run); 1 when Run
// fails, or when it lost its leader lease (an Info line, not an error:
// the restart is the way back in).
package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/component/logging"
	"github.com/gpufabric/gpufabric/pkg/component/version"
)

// Spec is one binary.
type Spec struct {
	// Name names the binary in --version, the logger and the first line.
	Name string
	// ApplyEnv sets every flag not given on the command line from its
	// twin, read through lookup.
	ApplyEnv func(fs *flag.FlagSet, lookup func(string) (string, bool)) error
	// Validate checks the parsed options; Run runs the binary until ctx
	// is done.
	Validate func() error
	Run      func(ctx context.Context) error
	// LostLeadership is the error Run wraps when the binary lost its
	// leader lease (nil: none).
	LostLeadership error
	// Lookup reads the environment (nil: os.LookupEnv).
	Lookup func(string) (string, bool)
}

// Main parses args into fs, whose own flags the caller has bound, and runs
// the binary; it returns the exit code.
func Main(s Spec, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) int {
	defer klog.Flush()
	fs.SetOutput(stderr)
	logOpts, err := logging.AddFlags(fs, "", nil)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		return 2
	}
	if *showVersion {
		fmt.Fprint(stdout, version.Get().Line(s.Name))
		return 0
	}
	lookup := s.Lookup
	if lookup == nil {
		lookup = os.LookupEnv
	}
	for _, step := range []func() error{
		func() error { return s.ApplyEnv(fs, lookup) }, s.Validate, logOpts.Apply,
	} {
		if err := step(); err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := klog.Background().WithName(s.Name)
	logger.Info("Starting "+s.Name, version.Get().KeysAndValues()...)
	err = s.Run(klog.NewContext(ctx, logger))
	switch {
	case err == nil:
		return 0
	case s.LostLeadership != nil && errors.Is(err, s.LostLeadership):
		logger.Info("Lost leadership, exiting")
		return 1
	default:
		logger.Error(err, "Exiting", "binary", s.Name)
		return 1
	}
}
