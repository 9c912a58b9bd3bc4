package inspect

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// Output formats.
const (
	FormatTable = "table"
	FormatJSON  = "json"
	FormatYAML  = "yaml"
)

// Formats lists the output formats.
var Formats = []string{FormatTable, FormatJSON, FormatYAML}

// Write prints report as JSON or YAML, or calls table for FormatTable
// (and "").
func Write(w io.Writer, format string, report any, table func(io.Writer) error) error {
	switch format {
	case FormatTable, "":
		return table(w)
	case FormatJSON:
		raw, err := json.MarshalIndent(report, "", "  ")
		if err != nil {
			return fmt.Errorf("encode json: %w", err)
		}
		_, err = fmt.Fprintf(w, "%s\n", raw)
		return err
	case FormatYAML:
		raw, err := yaml.Marshal(report)
		if err != nil {
			return fmt.Errorf("encode yaml: %w", err)
		}
		_, err = w.Write(raw)
		return err
	}
	return fmt.Errorf("unknown output format %q (want one of %s)", format, strings.Join(Formats, ", "))
}

// maxGangsShown bounds the gangs listed in one status row.
const maxGangsShown = 3

// RenderStatus prints one table per level of the fabric tree (a row per
// domain with counts, channels, an occupancy bar and the gangs holding
// GPUs), a cluster line, the waiting PodGroups and a legend.
func RenderStatus(w io.Writer, r *StatusReport, st Style) error {
	for _, l := range r.Levels {
		if len(l.Domains) == 0 {
			continue
		}
		t := newTable(w)
		t.row(levelHeader(l.Key), "NODES", "GPUS", "USED", "TAINTED", "FREE", "CHANNELS", "OCCUPANCY", "GANGS")
		for _, d := range l.Domains {
			t.row(d.ID, strconv.Itoa(d.Nodes), strconv.Itoa(d.GPUs.Total), strconv.Itoa(d.GPUs.Used),
				strconv.Itoa(d.GPUs.Tainted), strconv.Itoa(d.GPUs.Free), channels(d.Channels),
				bar(d.GPUs, st.BarWidth, st.Color), gangList(d.Gangs))
		}
		if err := t.flush(); err != nil {
			return err
		}
		if l.NodesWithoutGPUs > 0 {
			fmt.Fprintf(w, "(%s without GPUs of gpufabric.dev)\n", plural(l.NodesWithoutGPUs, "node", "nodes"))
		}
		if l.NodesWithoutLabel > 0 {
			fmt.Fprintf(w, "(%s without label %s)\n", plural(l.NodesWithoutLabel, "node", "nodes"), l.Key)
		}
		fmt.Fprintln(w)
	}
	c := r.Cluster
	fmt.Fprintf(w, "Cluster: %s, %s: %d used, %d tainted, %d free; fabric-domain channels: %d of %d used\n",
		plural(c.Nodes, "node", "nodes"), plural(c.GPUs.Total, "GPU", "GPUs"), c.GPUs.Used, c.GPUs.Tainted, c.GPUs.Free,
		c.Channels.Used, c.Channels.Total)
	renderSpares(w, r.Spares)
	if len(r.Waiting) > 0 {
		fmt.Fprintf(w, "Waiting PodGroups (%d):\n", len(r.Waiting))
		t := newTable(w)
		t.row("  QUEUE", "PODGROUP", "PRIORITY", "WAITING", "REASON", "MESSAGE")
		for _, g := range r.Waiting {
			t.row("  "+strconv.Itoa(g.Position), g.Namespace+"/"+g.Name, strconv.Itoa(int(g.Priority)), age(st.Now, g.Created),
				g.Reason, firstLine(orNone(g.Message), 120))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "Warning: %s\n", warn)
	}
	_, err := fmt.Fprintf(w, "Legend: %s used  %s tainted  %s free; CHANNELS used/total\n", cellUsed, cellTainted, cellFree)
	return err
}

func channels(c ChannelCounts) string {
	if c.Total == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d", c.Used, c.Total)
}

// gangList writes the first gangs of a domain: "ns/name (job j): 8".
func gangList(gangs []GangUse) string {
	if len(gangs) == 0 {
		return "-"
	}
	var parts []string
	for i, g := range gangs {
		if i == maxGangsShown {
			parts = append(parts, fmt.Sprintf("+%d more", len(gangs)-i))
			break
		}
		parts = append(parts, gangName(g.GangRef)+": "+strconv.Itoa(g.GPUs))
	}
	return strings.Join(parts, ", ")
}

// gangName writes a gang: "ns/name" for a PodGroup, "pod ns/name", "claim
// ns/name", with " (job j)" when a Job owns it.
func gangName(g GangRef) string {
	s := g.Namespace + "/" + g.Name
	switch g.Kind {
	case KindPod:
		s = "pod " + s
	case KindClaim:
		s = "claim " + s
	}
	if g.Job != "" {
		s += " (job " + g.Job + ")"
	}
	return s
}

// RenderNodes prints one row per node.
func RenderNodes(w io.Writer, r *NodesReport) error {
	t := newTable(w)
	header := []string{"NODE", "NVLINK DOMAIN"}
	for _, l := range r.Levels {
		header = append(header, levelHeader(l))
	}
	t.row(append(header, "GPUS", "USED", "TAINTED", "FREE", "MODEL", "GPU RAILS", "NIC RAILS", "DEVICE TAINTS", "NODE TAINTS")...)
	for _, n := range r.Nodes {
		cells := []string{n.Name, orNone(n.NVLinkDomain)}
		for _, v := range n.Levels {
			cells = append(cells, orNone(v))
		}
		cells = append(cells, strconv.Itoa(n.GPUs.Total), strconv.Itoa(n.GPUs.Used), strconv.Itoa(n.GPUs.Tainted),
			strconv.Itoa(n.GPUs.Free), orNone(strings.Join(n.Models, ",")), compactInts(n.GPURails), nicRails(n.NICs),
			deviceTaints(n.DeviceTaints), nodeTaints(n))
		t.row(cells...)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if r.OtherNodes > 0 {
		_, err := fmt.Fprintf(w, "(%s without devices of gpufabric.dev)\n", plural(r.OtherNodes, "node", "nodes"))
		return err
	}
	return nil
}

func nicRails(nics []NICInfo) string {
	seen := map[int64]bool{}
	for _, n := range nics {
		if n.Rail != nil {
			seen[*n.Rail] = true
		}
	}
	return compactInts(sortedKeys(seen))
}

// deviceTaints writes "key=value:effect(devices)" per taint.
func deviceTaints(taints []DeviceTaint) string {
	if len(taints) == 0 {
		return none
	}
	var parts []string
	for _, t := range taints {
		parts = append(parts, taintString(t.Key, t.Value, t.Effect)+"("+compactNames(t.Devices)+")")
	}
	return strings.Join(parts, ",")
}

func nodeTaints(n NodeInfo) string {
	parts := n.NodeTaints
	if n.Unschedulable {
		parts = append([]string{"SchedulingDisabled"}, parts...)
	}
	return orNone(strings.Join(parts, ","))
}
