package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/gpufabric/gpufabric/pkg/inspect"
	"github.com/gpufabric/gpufabric/pkg/sim/fabric"
)

func newSnapshotCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "snapshot",
		Short: "Export the live fabric and its load as a gpufabric-sim fabric file",
		Long: `Writes the cluster as gpufabric-sim reads it with --fabric-file: the
--topology-levels keys, the Nodes, the ResourceSlices of gpufabric.dev, and as
existing load the bound pods and allocated ResourceClaims (server-managed
metadata left out). YAML (the default, and with -o yaml) or JSON (-o json).`,
		Example: `  kubectl gpufabric snapshot --topology-levels=topology.gpufabric.dev/rack > fabric.yaml
  gpufabric-sim --fabric-file=fabric.yaml --key=topology.gpufabric.dev/rack`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := o.load(cmd.Context(), inspect.Need{Fabric: true, Claims: true, Pods: true})
			if err != nil {
				return err
			}
			raw, err := encodeFabric(fabricFile(cl, o.reportOptions()), o.output)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(raw)
			return err
		},
	}
}

// fabricFile is the cluster in gpufabric-sim's --fabric-file format.
func fabricFile(c *inspect.Cluster, opts inspect.Options) *fabric.File {
	ex := inspect.ForExport(c)
	return &fabric.File{Levels: opts.Levels, Nodes: ex.Nodes, ResourceSlices: ex.Slices, Pods: ex.Pods, ResourceClaims: ex.Claims}
}

func encodeFabric(ff *fabric.File, format string) ([]byte, error) {
	if format == inspect.FormatJSON {
		raw, err := json.MarshalIndent(ff, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("encode json: %w", err)
		}
		return append(raw, '\n'), nil
	}
	raw, err := yaml.Marshal(ff)
	if err != nil {
		return nil, fmt.Errorf("encode yaml: %w", err)
	}
	return raw, nil
}
