package mock

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Fabric is a parsed, validated fabric file: every node of a cluster.
type Fabric struct {
	path  string
	nodes []*node
	index map[string]*node
}

// NodeInfo describes one node of a fabric.
type NodeInfo struct {
	Name string
	// Group is the index of the node's group in nodeGroups.
	Group  int
	Labels map[string]string
	// GPUModel is the fabric file's model name ("GB200").
	GPUModel   string
	GPUs       int
	HCAs       int
	NVLinkKind topology.DomainKind
}

// node is one expanded node.
type node struct {
	name          string
	group         int
	labels        map[string]string
	modelName     string
	model         gpuModel
	gpuCount      int
	driverVersion string
	kind          topology.DomainKind
	clusterUUID   [16]byte
	cliqueID      uint32
	hcaCount      int
	linkLayer     string
	rateGbps      int
	gpuRails      []int
	numaNodes     int
	allocatable   corev1.ResourceList
	faults        nodeFaults
}

// LoadFile reads and validates a fabric file. Errors name the file, the
// node (or node group / fault) and the field.
func LoadFile(path string) (*Fabric, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read fabric file: %w", err)
	}
	defer func() { _ = file.Close() }()
	if fi, err := file.Stat(); err == nil && fi.Size() > MaxFileSize {
		return nil, tooBig(path, fi.Size())
	}
	data, err := io.ReadAll(io.LimitReader(file, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read fabric file %s: %w", path, err)
	}
	return Parse(path, data)
}

func tooBig(name string, size int64) error {
	return fmt.Errorf("%s: file is %d bytes, more than the limit of %d (8 MiB)", name, size, MaxFileSize)
}

// Parse validates a fabric file's content; name is used in errors. Unknown
// fields are errors.
func Parse(name string, data []byte) (*Fabric, error) {
	if len(data) > MaxFileSize {
		return nil, tooBig(name, int64(len(data)))
	}
	spec, err := decodeStrict(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(spec.NodeGroups) == 0 {
		return nil, fmt.Errorf("%s: nodeGroups: at least one node group is required", name)
	}
	if len(spec.Faults) > MaxFaults {
		return nil, fmt.Errorf("%s: faults: %d entries, more than the limit of %d", name, len(spec.Faults), MaxFaults)
	}
	f := &Fabric{path: name, index: map[string]*node{}}
	for i, g := range spec.NodeGroups {
		nodes, err := expandGroup(i, g, MaxNodes-len(f.nodes))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for _, n := range nodes {
			if prev, dup := f.index[n.name]; dup {
				return nil, fmt.Errorf("%s: node %s: nodeGroups[%d].name: duplicate node (also in nodeGroups[%d])", name, n.name, i, prev.group)
			}
			f.index[n.name] = n
			f.nodes = append(f.nodes, n)
		}
	}
	for i, fs := range spec.Faults {
		if err := f.applyFault(i, fs); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return f, nil
}

// decodeStrict decodes YAML rejecting duplicate keys and unknown fields;
// errors carry the field's path ("nodeGroups[0].hcas.speed").
func decodeStrict(data []byte) (fileSpec, error) {
	var spec fileSpec
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return spec, fmt.Errorf("parse yaml: %w", err)
	}
	strict, err := sigsjson.UnmarshalStrict(js, &spec, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return spec, fmt.Errorf("decode: %w", err)
	}
	if len(strict) > 0 {
		return spec, errors.Join(strict...)
	}
	return spec, nil
}

// Path is the file the fabric was loaded from.
func (f *Fabric) Path() string { return f.path }

// Nodes lists the fabric's nodes in file order.
func (f *Fabric) Nodes() []NodeInfo {
	out := make([]NodeInfo, 0, len(f.nodes))
	for _, n := range f.nodes {
		out = append(out, n.info())
	}
	return out
}

// Node returns one node's description.
func (f *Fabric) Node(name string) (NodeInfo, bool) {
	n, ok := f.index[name]
	if !ok {
		return NodeInfo{}, false
	}
	return n.info(), true
}

func (n *node) info() NodeInfo {
	return NodeInfo{Name: n.name, Group: n.group, Labels: n.nodeLabels(), GPUModel: n.modelName, GPUs: n.gpuCount, HCAs: n.hcaCount, NVLinkKind: n.kind}
}

// nodeLabels are the file's labels plus kubernetes.io/hostname.
func (n *node) nodeLabels() map[string]string {
	l := map[string]string{corev1.LabelHostname: n.name}
	for k, v := range n.labels {
		l[k] = v
	}
	return l
}

// namePatternVerb is the one verb of a name pattern: %d, %2d, %02d; the
// width has at most two digits (a node name has at most 253 characters).
var namePatternVerb = regexp.MustCompile(`%(0?[1-9][0-9]?)?d`)

// expandGroup validates a node group and returns its nodes; room is how
// many more nodes the fabric may have.
func expandGroup(i int, g groupSpec, room int) ([]*node, error) {
	errf := func(field, format string, args ...any) error {
		return fmt.Errorf("nodeGroups[%d] (%s): %s: %s", i, g.Name, field, fmt.Sprintf(format, args...))
	}
	count, start := intOr(g.Count, 1), intOr(g.Start, 1)
	switch {
	case count < 1 || count > MaxNodes:
		return nil, errf("count", "must be 1..%d, got %d", MaxNodes, count)
	case count > room:
		return nil, errf("count", "%d more nodes make %d, more than the limit of %d nodes per fabric", count, MaxNodes-room+count, MaxNodes)
	case start < 0 || start > MaxStart:
		return nil, errf("start", "must be 0..%d, got %d", MaxStart, start)
	}
	pattern := strings.Contains(g.Name, "%")
	switch {
	case g.Name == "":
		return nil, errf("name", "required")
	case pattern && (len(namePatternVerb.FindAllString(g.Name, -1)) != 1 || strings.Count(g.Name, "%") != 1):
		return nil, errf("name", "a pattern needs exactly one %%d verb (width at most two digits)")
	case !pattern && count > 1:
		return nil, errf("name", "count %d needs a name pattern with one %%d verb", count)
	}
	proto, err := groupNode(i, g, errf)
	if err != nil {
		return nil, err
	}
	nodes := make([]*node, 0, count)
	for k := range count {
		n := *proto
		n.name = g.Name
		if pattern {
			n.name = fmt.Sprintf(g.Name, start+k)
		}
		if msgs := validation.IsDNS1123Subdomain(n.name); len(msgs) > 0 {
			return nil, fmt.Errorf("node %s: nodeGroups[%d].name: %s", n.name, i, strings.Join(msgs, "; "))
		}
		nodes = append(nodes, &n)
	}
	return nodes, nil
}

type errFunc func(field, format string, args ...any) error

// groupNode validates everything but the names and returns a node template.
func groupNode(i int, g groupSpec, errf errFunc) (*node, error) {
	model, ok := gpuModels()[g.GPUs.Model]
	if !ok {
		return nil, errf("gpus.model", "unknown GPU model %q (known: %s)", g.GPUs.Model, modelNames())
	}
	n := &node{group: i, labels: g.Labels, modelName: g.GPUs.Model, model: model, driverVersion: g.DriverVersion}
	n.gpuCount = intOr(g.GPUs.Count, model.defaultCount)
	if n.gpuCount < 1 || n.gpuCount > MaxGPUsPerNode {
		return nil, errf("gpus.count", "must be 1..%d, got %d", MaxGPUsPerNode, n.gpuCount)
	}
	n.numaNodes = intOr(g.NUMANodes, 2)
	if n.numaNodes < 1 || n.numaNodes > MaxNUMANodes {
		return nil, errf("numaNodes", "must be 1..%d, got %d", MaxNUMANodes, n.numaNodes)
	}
	if err := validateLabels(g.Labels, errf); err != nil {
		return nil, err
	}
	if err := n.setNVLink(g.NVLink, errf); err != nil {
		return nil, err
	}
	if err := n.setHCAs(g.HCAs, errf); err != nil {
		return nil, err
	}
	alloc, err := allocatable(model, g.Allocatable, errf)
	if err != nil {
		return nil, err
	}
	n.allocatable = alloc
	return n, nil
}

func (n *node) setNVLink(s nvlinkSpec, errf errFunc) error {
	switch topology.DomainKind(s.Kind) {
	case topology.DomainKindMNNVL:
		if !n.model.fabricCapable() {
			return errf("nvlink.kind", "model %s cannot join a multi-node NVLink fabric", n.modelName)
		}
		return n.setClique(s, errf)
	case topology.DomainKindNVSwitch:
		if n.model.nvlinks == 0 {
			return errf("nvlink.kind", "model %s has no NVLink", n.modelName)
		}
	case topology.DomainKindNone:
	default:
		return errf("nvlink.kind", "must be mnnvl, nvswitch or none, got %q", s.Kind)
	}
	n.kind = topology.DomainKind(s.Kind)
	if s.ClusterUUID != "" || s.CliqueID != nil || len(s.GPUCliqueIDs) > 0 {
		return errf("nvlink", "clusterUUID, cliqueID and gpuCliqueIDs are only for kind mnnvl")
	}
	return nil
}

func (n *node) setClique(s nvlinkSpec, errf errFunc) error {
	n.kind = topology.DomainKindMNNVL
	u, err := uuid.Parse(s.ClusterUUID)
	if err != nil || u == uuid.Nil {
		return errf("nvlink.clusterUUID", "must be a non-zero UUID, got %q", s.ClusterUUID)
	}
	n.clusterUUID = [16]byte(u)
	if len(s.GPUCliqueIDs) > 0 && len(s.GPUCliqueIDs) != n.gpuCount {
		return errf("nvlink.gpuCliqueIDs", "has %d entries for %d GPUs", len(s.GPUCliqueIDs), n.gpuCount)
	}
	cliques := append([]int64(nil), s.GPUCliqueIDs...)
	if s.CliqueID != nil {
		cliques = append(cliques, *s.CliqueID)
	}
	if len(cliques) == 0 {
		return errf("nvlink.cliqueID", "required for kind mnnvl")
	}
	for _, c := range cliques {
		if c != cliques[0] {
			return errf("nvlink.gpuCliqueIDs", "the node's GPUs claim two cliques (%d and %d)", cliques[0], c)
		}
	}
	if cliques[0] < 0 || cliques[0] > 1<<32-1 {
		return errf("nvlink.cliqueID", "must fit in 32 bits, got %d", cliques[0])
	}
	n.cliqueID = uint32(cliques[0])
	return nil
}

func (n *node) setHCAs(s hcaSpec, errf errFunc) error {
	n.hcaCount, n.linkLayer, n.rateGbps = s.Count, s.LinkLayer, s.RateGbps
	if n.hcaCount < 0 || n.hcaCount > MaxHCAsPerNode {
		return errf("hcas.count", "must be 0..%d, got %d", MaxHCAsPerNode, n.hcaCount)
	}
	if n.linkLayer == "" {
		n.linkLayer = "InfiniBand"
	}
	if n.linkLayer != "InfiniBand" && n.linkLayer != "Ethernet" {
		return errf("hcas.linkLayer", "must be InfiniBand or Ethernet, got %q", n.linkLayer)
	}
	if n.rateGbps == 0 {
		n.rateGbps = 400
	}
	if n.rateGbps < 0 || n.rateGbps > MaxRateGbps {
		return errf("hcas.rateGbps", "must be 1..%d, got %d", MaxRateGbps, n.rateGbps)
	}
	if len(s.GPURails) == 0 {
		for g := range n.gpuCount {
			if n.hcaCount > 0 {
				n.gpuRails = append(n.gpuRails, g*n.hcaCount/n.gpuCount)
			}
		}
		return nil
	}
	if len(s.GPURails) != n.gpuCount {
		return errf("hcas.gpuRails", "has %d entries for %d GPUs", len(s.GPURails), n.gpuCount)
	}
	for g, r := range s.GPURails {
		if r < 0 || r >= n.hcaCount {
			return errf(fmt.Sprintf("hcas.gpuRails[%d]", g), "rail %d does not exist (the node has %d HCAs)", r, n.hcaCount)
		}
	}
	n.gpuRails = s.GPURails
	return nil
}

func validateLabels(labels map[string]string, errf errFunc) error {
	for k, v := range labels {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			return errf("labels", "key %q: %s", k, strings.Join(msgs, "; "))
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			return errf("labels."+k, "value %q: %s", v, strings.Join(msgs, "; "))
		}
	}
	return nil
}

// allocatable is the node's CPU, memory and pods: the model's defaults,
// overridden by the file.
func allocatable(m gpuModel, spec map[string]string, errf errFunc) (corev1.ResourceList, error) {
	values := map[string]string{"cpu": m.cpu, "memory": m.memory, "pods": "110"}
	for k, v := range spec {
		if _, ok := values[k]; !ok {
			return nil, errf("allocatable", "unknown resource %q (cpu, memory, pods)", k)
		}
		values[k] = v
	}
	out := corev1.ResourceList{}
	for k, v := range values {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, errf("allocatable."+k, "%v", err)
		}
		out[corev1.ResourceName(k)] = q
	}
	return out, nil
}

func intOr(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}
