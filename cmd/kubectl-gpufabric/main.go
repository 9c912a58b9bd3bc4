// Command kubectl-gpufabric is the kubectl plugin `kubectl gpufabric`:
// fabric occupancy (status), where a PodGroup went or why it waits
// (explain), and GPUs, rails and taints per node (nodes). Install it by
// putting the binary on PATH (or with krew, deployments/krew/gpufabric.yaml);
// see docs/kubectl-gpufabric.md. The commands live in pkg/inspect/cli.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/component/version"
	"github.com/gpufabric/gpufabric/pkg/inspect/cli"
)

func main() {
	os.Exit(run(os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}))
}

func run(args []string, streams genericiooptions.IOStreams) int {
	defer klog.Flush()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background().WithName("kubectl-gpufabric"))
	info := version.Get()
	cmd := cli.NewCommand(cli.Config{
		Streams: streams,
		// --version and `version`: "v0.2.0, commit 1a2b3c" (pkg/component/version).
		Version: info.Version + ", commit " + info.Commit,
	})
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(streams.ErrOut, "error: %v\n", err)
		return 1
	}
	return 0
}
