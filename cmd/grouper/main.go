// Command grouper runs gpufabric-grouper: it creates the Workload and
// PodGroups of the workloads users submit unchanged (JobSet,
// LeaderWorkerSet, RayCluster, Indexed Jobs, scheduler-plugins' and
// Volcano's PodGroups) so that gpufabric-scheduler places them as gangs
// (pkg/workloads/grouper). It runs under its own identity, apart from
// the scheduler: it writes PodGroups and Workloads, never bindings or
// claims.
//
// Every flag has an environment variable twin (options.go); a flag given
// on the command line wins. --version prints the build.
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
	"github.com/gpufabric/gpufabric/pkg/workloads/grouper"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	defer klog.Flush()
	fs := flag.NewFlagSet(grouper.Name, flag.ContinueOnError)
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
		fmt.Fprint(stdout, version.Get().Line(grouper.Name))
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
	logger := klog.Background().WithName(grouper.Name)
	logger.Info("Starting "+grouper.Name, version.Get().KeysAndValues()...)
	ctx = klog.NewContext(ctx, logger)
	switch err := opts.run(ctx); {
	case err == nil:
		return 0
	case errors.Is(err, errLostLeadership):
		logger.Info("Lost leadership, exiting")
		return 1
	default:
		logger.Error(err, "Grouper failed")
		return 1
	}
}
