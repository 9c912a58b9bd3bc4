// Command scheduler runs gpufabric-scheduler: the fabric-aware gang
// scheduler and the fabric-domain pool publisher, under leader election.
//
// Every flag has an environment variable twin (see options.go); a flag given
// on the command line wins.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
)

func main() {
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet(os.Args[0], flag.ContinueOnError)
	klog.InitFlags(fs)
	opts := bindFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if err := applyEnv(fs, os.LookupEnv); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := opts.validate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := klog.Background().WithName("gpufabric-scheduler")
	ctx = klog.NewContext(ctx, logger)
	err := opts.run(ctx)
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
