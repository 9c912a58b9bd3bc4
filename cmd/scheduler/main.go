// Command scheduler runs gpufabric-scheduler: the fabric-aware gang
// scheduler and the fabric-domain pool publisher, under leader election.
//
// Every flag has an environment variable twin (see options.go); a flag given
// on the command line wins. Logging takes component-base's flags
// (--logging-format=text|json, -v, --vmodule); --version prints the build.
package main

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
	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
)

const binaryName = "gpufabric-scheduler"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	defer klog.Flush()
	fs := flag.NewFlagSet(binaryName, flag.ContinueOnError)
	fs.SetOutput(stderr)
	opts := bindFlags(fs)
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
		fmt.Fprint(stdout, version.Get().Line(binaryName))
		return 0
	}
	if err := applyEnv(fs, os.LookupEnv); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if err := opts.validate(); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if err := logOpts.Apply(); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := klog.Background().WithName(binaryName)
	logger.Info("Starting "+binaryName, version.Get().KeysAndValues()...)
	ctx = klog.NewContext(ctx, logger)
	err = opts.run(ctx)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, scheduler.ErrLostLeadership):
		logger.Info("Lost leadership, exiting")
		return 1
	default:
		logger.Error(err, "Scheduler failed")
		return 1
	}
}
