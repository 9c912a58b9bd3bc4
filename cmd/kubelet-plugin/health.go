package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/gpufabric/gpufabric/pkg/claims/node"
	"github.com/gpufabric/gpufabric/pkg/devices"
)

// runHealth lists or clears the taints GPU events left for this boot:
//
//	kubelet-plugin health list
//	kubelet-plugin health clear [--gpu UUID ...]   after a GPU reset (a reboot clears them anyway)
//
// Running plugins publish the change at their next health interval.
func runHealth(_ context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("health", os.Stderr)
	stateDir := fs.String("state-dir", envOr("GPUFABRIC_STATE_DIR", "/var/lib/gpufabric"), "the plugin's state directory (env GPUFABRIC_STATE_DIR)")
	bootIDPath := fs.String("boot-id-path", envOr("GPUFABRIC_BOOT_ID_PATH", node.DefaultBootIDPath), "file holding the boot id (env GPUFABRIC_BOOT_ID_PATH)")
	var gpus stringList
	fs.Var(&gpus, "gpu", "GPU UUID whose taints clear removes (repeatable; default: every GPU)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 || (fs.Arg(0) != "list" && fs.Arg(0) != "clear") {
		return fmt.Errorf("%w: health needs one action, list or clear", errUsage)
	}
	bootID, err := os.ReadFile(*bootIDPath)
	if err != nil {
		return fmt.Errorf("read boot id: %w", err)
	}
	store := devices.NewEventTaints(*stateDir, strings.TrimSpace(string(bootID)), devices.DefaultHealthPolicy(), true)
	if fs.Arg(0) == "clear" {
		n, err := store.Clear(gpus...)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "cleared the event taints of %d GPUs\n", n)
		return err
	}
	taints, err := store.Load()
	if err != nil {
		return err
	}
	for _, uuid := range slices.Sorted(maps.Keys(taints)) {
		for _, t := range taints[uuid] {
			if _, err := fmt.Fprintf(stdout, "%s\t%s=%s:%s\t%s\n", uuid, t.Key, t.Value, t.Effect, t.TimeAdded.UTC().Format("2006-01-02T15:04:05Z")); err != nil {
				return err
			}
		}
	}
	return nil
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }
