package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/gpufabric/gpufabric/pkg/sim/fabric"
	"github.com/gpufabric/gpufabric/pkg/sim/trees"
)

// SizeWeight is one gang size (total GPUs) and its relative frequency.
type SizeWeight struct {
	GPUs   int     `json:"gpus"`
	Weight float64 `json:"weight"`
}

// DefaultSizes is the default mix of gang sizes, by count: many small
// gangs, few large ones; by GPUs the 128–512 GPU gangs dominate.
func DefaultSizes() []SizeWeight {
	return []SizeWeight{
		{1, 10}, {2, 10}, {4, 15}, {8, 15}, {16, 15}, {32, 12}, {64, 10}, {128, 6}, {256, 4}, {512, 3},
	}
}

// TraceConfig says how to generate a trace.
type TraceConfig struct {
	Seed  uint64 `json:"seed"`
	Gangs int    `json:"gangs"`
	// Load is the offered load: arrival rate × mean GPU-seconds per gang /
	// ClusterGPUs. Above 1 the queue grows and the cluster fills.
	Load        float64 `json:"load"`
	ClusterGPUs int     `json:"clusterGPUs"`
	// GPUsPerNode is the pod size of multi-pod gangs: a gang of G GPUs is
	// one pod of G GPUs when G ≤ GPUsPerNode, else ⌈G/GPUsPerNode⌉ pods of
	// GPUsPerNode GPUs.
	GPUsPerNode int `json:"gpusPerNode"`
	// MeanDuration of a gang in seconds (exponential, at least 60 s).
	MeanDuration float64      `json:"meanDuration"`
	Sizes        []SizeWeight `json:"sizes"`
	// Trees, when set with a share above 0, makes that share of the jobs
	// tree jobs (issue 25: segmented training jobs, inference services),
	// drawn from a PCG of their own: the flat gangs' draws, and so a trace
	// without trees, stay as they were; arrivals are paced by the mean GPUs
	// of the mix.
	Trees *trees.Mix `json:"trees,omitempty"`
}

// Trace is a replayable list of gangs, sorted by arrival time then ID.
type Trace struct {
	Config TraceConfig `json:"config"`
	Gangs  []TraceGang `json:"gangs"`
}

// TraceGang is one gang: Pods identical pods of GPUsPerPod GPUs each, or
// a tree job (Tree; Pods and GPUsPerPod then 0): its pods in Tree.Flat
// order. Times are whole seconds of simulated time.
type TraceGang struct {
	ID         int         `json:"id"`
	Arrival    int64       `json:"arrival"`
	Duration   int64       `json:"duration"`
	Pods       int         `json:"pods,omitempty"`
	GPUsPerPod int         `json:"gpusPerPod,omitempty"`
	Tree       *trees.Spec `json:"tree,omitempty"`
}

// GPUs is the gang's total.
func (g TraceGang) GPUs() int {
	if g.Tree != nil {
		return g.Tree.GPUs()
	}
	return g.Pods * g.GPUsPerPod
}

// PodGPUs lists each pod's GPUs.
func (g TraceGang) PodGPUs() []int {
	if g.Tree == nil {
		out := make([]int, g.Pods)
		for i := range out {
			out[i] = g.GPUsPerPod
		}
		return out
	}
	var out []int
	for _, p := range g.Tree.Flat() {
		out = append(out, p.GPUs)
	}
	return out
}

// DefaultTraceConfig is the default trace for a cluster: 600 gangs at
// load 1.3, sizes from DefaultSizes up to the cluster size, one hour mean.
func DefaultTraceConfig(seed uint64, f *fabric.Fabric) TraceConfig {
	return TraceConfig{
		Seed: seed, Gangs: 600, Load: 1.3, ClusterGPUs: f.TotalGPUs, GPUsPerNode: f.GPUsPerNode(),
		MeanDuration: 3600, Sizes: DefaultSizes(),
	}
}

// GenerateTrace draws a trace from cfg.Seed: Poisson arrivals, sizes from
// cfg.Sizes (those larger than the cluster dropped), exponential durations.
func GenerateTrace(cfg TraceConfig) (*Trace, error) {
	if cfg.Gangs <= 0 || cfg.Load <= 0 || cfg.ClusterGPUs <= 0 || cfg.GPUsPerNode <= 0 || cfg.MeanDuration <= 0 {
		return nil, fmt.Errorf("trace config %+v: gangs, load, cluster GPUs, GPUs per node and duration must be positive", cfg)
	}
	var sizes []SizeWeight
	var total, meanGPUs float64
	for _, s := range cfg.Sizes {
		if s.GPUs > 0 && s.GPUs <= cfg.ClusterGPUs && s.Weight > 0 {
			sizes = append(sizes, s)
			total += s.Weight
			meanGPUs += float64(s.GPUs) * s.Weight
		}
	}
	if total == 0 {
		return nil, fmt.Errorf("no gang size fits %d GPUs", cfg.ClusterGPUs)
	}
	meanGPUs /= total
	mix := cfg.Trees
	if mix != nil && mix.Share == 0 {
		mix = nil
	}
	if mix != nil {
		if err := mix.Validate(); err != nil {
			return nil, err
		}
		treeGPUs, _ := mix.MeanGPUs()
		meanGPUs = (1-mix.Share)*meanGPUs + mix.Share*treeGPUs
	}
	rate := cfg.Load * float64(cfg.ClusterGPUs) / (meanGPUs * cfg.MeanDuration) // gangs per second
	r := rand.New(rand.NewPCG(cfg.Seed, 0x9f4ab1c))
	rt := rand.New(rand.NewPCG(cfg.Seed, 0x74726565)) // trees
	tr := &Trace{Config: cfg}
	t := 0.0
	for id := range cfg.Gangs {
		t += r.ExpFloat64() / rate
		gpus := pickSize(r, sizes, total)
		g := TraceGang{ID: id, Arrival: int64(math.Round(t)), Duration: max(60, int64(math.Round(r.ExpFloat64()*cfg.MeanDuration)))}
		switch {
		case mix != nil && rt.Float64() < mix.Share:
			g.Tree = mix.Draw(rt)
		case gpus <= cfg.GPUsPerNode:
			g.Pods, g.GPUsPerPod = 1, gpus
		default:
			g.Pods, g.GPUsPerPod = (gpus+cfg.GPUsPerNode-1)/cfg.GPUsPerNode, cfg.GPUsPerNode
		}
		tr.Gangs = append(tr.Gangs, g)
	}
	return tr, nil
}

// TreeOptions say how many tree jobs a generated trace has and how its
// services ask for their rails (sim.TraceConfig.WithTrees).
type TreeOptions struct {
	// Share of the jobs that are trees (0: none); InferenceShare of those
	// that are inference services.
	Share, InferenceShare float64
	// RailCoupling of the services' prefill and decode
	// (trees.CouplingRequired, the default, or trees.CouplingPreferred).
	RailCoupling string
}

// WithTrees mixes tree jobs into the trace generated for fabric f: the
// default shapes (trees.DefaultMix) with a whole job in one domain of
// fabric.LabelLeaf (the IB leaf), sized to fit f.
func (cfg *TraceConfig) WithTrees(f *fabric.Fabric, o TreeOptions) error {
	if o.Share == 0 {
		cfg.Trees = nil
		return nil
	}
	l := f.Level(fabric.LabelLeaf)
	if l < 0 {
		return fmt.Errorf("tree jobs need the fabric level %q (levels %v)", fabric.LabelLeaf, f.Levels)
	}
	fit := trees.Fit{GPUsPerNode: f.GPUsPerNode(), ClusterGPUs: f.TotalGPUs, NVLinkGPUs: f.MaxNVLinkGPUs}
	for _, d := range f.Domains[l] {
		fit.GroupGPUs = max(fit.GroupGPUs, d.GPUs)
	}
	cfg.Trees = trees.DefaultMix(o.Share, fabric.LabelLeaf, fit)
	cfg.Trees.InferenceShare, cfg.Trees.RailCoupling = o.InferenceShare, o.RailCoupling
	return cfg.Trees.Validate()
}

func pickSize(r *rand.Rand, sizes []SizeWeight, total float64) int {
	x := r.Float64() * total
	for _, s := range sizes {
		if x < s.Weight {
			return s.GPUs
		}
		x -= s.Weight
	}
	return sizes[len(sizes)-1].GPUs
}

// SaveTrace writes a trace as YAML.
func SaveTrace(path string, tr *Trace) error {
	data, err := yaml.Marshal(tr)
	if err != nil {
		return fmt.Errorf("marshal trace: %w", err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("write trace: %w", err)
	}
	return nil
}

// LoadTrace reads a trace written by SaveTrace (YAML or JSON).
func LoadTrace(path string) (*Trace, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read trace: %w", err)
	}
	var tr Trace
	if err := yaml.UnmarshalStrict(data, &tr); err != nil {
		return nil, fmt.Errorf("parse trace %s: %w", path, err)
	}
	for i, g := range tr.Gangs {
		if err := g.validate(); err != nil {
			return nil, fmt.Errorf("trace %s: gang %d: %w", path, g.ID, err)
		}
		if g.Duration <= 0 || (i > 0 && g.Arrival < tr.Gangs[i-1].Arrival) {
			return nil, fmt.Errorf("trace %s: gang %d invalid or out of arrival order", path, g.ID)
		}
	}
	return &tr, nil
}

// validate checks a gang's shape: pods and GPUs per pod, or a valid tree
// and neither.
func (g TraceGang) validate() error {
	if g.Tree != nil {
		if g.Pods != 0 || g.GPUsPerPod != 0 {
			return fmt.Errorf("a tree job has no pods or gpusPerPod of its own")
		}
		return g.Tree.Validate()
	}
	if g.Pods <= 0 || g.GPUsPerPod <= 0 {
		return fmt.Errorf("%d pods of %d GPUs", g.Pods, g.GPUsPerPod)
	}
	return nil
}
