package trees

import (
	"fmt"
	"math/rand/v2"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Mix says how tree jobs are mixed into a generated trace: Share of the
// jobs are trees, InferenceShare of those inference services, the rest
// segmented training jobs; shapes are drawn by weight among those that fit
// the cluster (Fit).
type Mix struct {
	Share          float64 `json:"share"`
	InferenceShare float64 `json:"inferenceShare"`
	// SegmentKey is the level each training segment (and each small
	// inference service) lies in: the NVLink domain by default. GroupKey
	// is the level a whole training job (and a large inference service)
	// lies in: the IB leaf by default.
	SegmentKey string           `json:"segmentKey,omitempty"`
	GroupKey   string           `json:"groupKey,omitempty"`
	Training   []TrainingShape  `json:"training,omitempty"`
	Inference  []InferenceShape `json:"inference,omitempty"`
	// RailCoupling is how a service's prefill and decode ask for one set
	// of IB rails (Spec.RailCoupling; "": required).
	RailCoupling string `json:"railCoupling,omitempty"`
	// Fit is the cluster the shapes must fit (set from the fabric).
	Fit Fit `json:"fit"`
}

// TrainingShape is a training job of Segments segments of SegmentGPUs
// GPUs each (pods of a whole node, or of the segment when it is smaller).
type TrainingShape struct {
	Segments    int     `json:"segments"`
	SegmentGPUs int     `json:"segmentGPUs"`
	Weight      float64 `json:"weight"`
}

// InferenceShape is a service: one frontend pod of FrontendGPUs GPUs (0:
// CPU only), PrefillPods and DecodePods pods of GPUsPerPod GPUs; in one
// NVLink domain, or in one GroupKey domain when InGroup.
type InferenceShape struct {
	FrontendGPUs int     `json:"frontendGPUs"`
	PrefillPods  int     `json:"prefillPods"`
	DecodePods   int     `json:"decodePods"`
	GPUsPerPod   int     `json:"gpusPerPod"`
	InGroup      bool    `json:"inGroup,omitempty"`
	Weight       float64 `json:"weight"`
}

// GPUs is the service's total.
func (s InferenceShape) GPUs() int {
	return s.FrontendGPUs + (s.PrefillPods+s.DecodePods)*s.GPUsPerPod
}

// DefaultMix is share of the jobs as trees, half of them inference
// services, with the default shapes and keys (groupKey: the fabric's IB
// leaf label), for a cluster fit.
func DefaultMix(share float64, groupKey string, fit Fit) *Mix {
	return &Mix{
		Share: share, InferenceShare: 0.5, SegmentKey: topology.TopologyKeyNVLinkDomain, GroupKey: groupKey, Fit: fit,
		// 8 segments of 16 ranks (one GPU each) = 128 GPUs; segments of
		// 64 GPUs use 16 of an NVL72 rack's 18 trays.
		Training: []TrainingShape{{8, 16, 3}, {4, 16, 3}, {2, 64, 2}, {4, 64, 2}, {8, 64, 1}},
		// Prefill and decode pods of 1 or 2 GPUs, so that their IB rails
		// can differ on a node (4 GPUs, rails 0–3, on NVL72).
		Inference: []InferenceShape{
			{0, 2, 4, 2, false, 3}, {1, 4, 8, 1, false, 3}, {1, 4, 8, 2, false, 2}, {1, 16, 32, 2, true, 1},
		},
	}
}

// Fit is what a shape must fit: GPUs per node (pod size), the cluster's
// GPUs, the largest NVLink domain's and the largest GroupKey domain's.
type Fit struct {
	GPUsPerNode int `json:"gpusPerNode"`
	ClusterGPUs int `json:"clusterGPUs"`
	NVLinkGPUs  int `json:"nvlinkGPUs"`
	GroupGPUs   int `json:"groupGPUs"`
}

// fits reports whether a training shape fits: whole pods per segment, a
// segment in an NVLink domain, the job in a group domain.
func (s TrainingShape) fits(f Fit) bool {
	pod := min(f.GPUsPerNode, s.SegmentGPUs)
	return s.Segments > 0 && s.SegmentGPUs > 0 && s.Weight > 0 && pod > 0 && s.SegmentGPUs%pod == 0 &&
		s.SegmentGPUs <= f.NVLinkGPUs && s.Segments*s.SegmentGPUs <= min(f.GroupGPUs, f.ClusterGPUs)
}

func (s InferenceShape) fits(f Fit) bool {
	room := f.NVLinkGPUs
	if s.InGroup {
		room = f.GroupGPUs
	}
	return s.Weight > 0 && s.PrefillPods > 0 && s.DecodePods > 0 && s.GPUsPerPod > 0 && s.FrontendGPUs >= 0 &&
		s.GPUsPerPod <= f.GPUsPerNode && s.FrontendGPUs <= f.GPUsPerNode && s.GPUs() <= min(room, f.ClusterGPUs)
}

// MeanGPUs is the mean GPUs of a tree drawn by Draw; ok is false when no
// shape fits.
func (m *Mix) MeanGPUs() (mean float64, ok bool) {
	tr, tw := m.training()
	in, iw := m.inference()
	var tMean, iMean float64
	for _, s := range tr {
		tMean += float64(s.Segments*s.SegmentGPUs) * s.Weight / tw
	}
	for _, s := range in {
		iMean += float64(s.GPUs()) * s.Weight / iw
	}
	if len(tr) == 0 && len(in) == 0 {
		return 0, false
	}
	p := m.inferenceShare(tr, in)
	return (1-p)*tMean + p*iMean, true
}

// inferenceShare is InferenceShare, 0 or 1 when only one kind fits.
func (m *Mix) inferenceShare(tr []TrainingShape, in []InferenceShape) float64 {
	switch {
	case len(in) == 0:
		return 0
	case len(tr) == 0:
		return 1
	}
	return min(max(m.InferenceShare, 0), 1)
}

func (m *Mix) training() ([]TrainingShape, float64) {
	var out []TrainingShape
	w := 0.0
	for _, s := range m.Training {
		if s.fits(m.Fit) {
			out, w = append(out, s), w+s.Weight
		}
	}
	return out, w
}

func (m *Mix) inference() ([]InferenceShape, float64) {
	var out []InferenceShape
	w := 0.0
	for _, s := range m.Inference {
		if s.fits(m.Fit) {
			out, w = append(out, s), w+s.Weight
		}
	}
	return out, w
}

// Validate checks a mix: shares in [0, 1], keys set, some shape that fits
// when Share > 0.
func (m *Mix) Validate() error {
	if m.Share < 0 || m.Share > 1 || m.InferenceShare < 0 || m.InferenceShare > 1 {
		return fmt.Errorf("tree share %v and inference share %v: want 0..1", m.Share, m.InferenceShare)
	}
	if m.Share == 0 {
		return nil
	}
	if m.SegmentKey == "" || m.GroupKey == "" {
		return fmt.Errorf("tree mix: segment and group keys must be set")
	}
	if c := m.RailCoupling; c != "" && c != CouplingRequired && c != CouplingPreferred {
		return fmt.Errorf("tree mix: rail coupling %q, want %s or %s", c, CouplingRequired, CouplingPreferred)
	}
	if _, ok := m.MeanGPUs(); !ok {
		return fmt.Errorf("no tree shape fits this cluster (%+v)", m.Fit)
	}
	return nil
}

// Draw draws one tree from r.
func (m *Mix) Draw(r *rand.Rand) *Spec {
	tr, tw := m.training()
	in, iw := m.inference()
	if r.Float64() < m.inferenceShare(tr, in) {
		x := r.Float64() * iw
		for _, s := range in {
			if x -= s.Weight; x < 0 {
				return m.service(s)
			}
		}
		return m.service(in[len(in)-1])
	}
	x := r.Float64() * tw
	for _, s := range tr {
		if x -= s.Weight; x < 0 {
			return m.job(s)
		}
	}
	return m.job(tr[len(tr)-1])
}

// job is a training tree: segments seg0… of whole-node pods in
// SegmentKey domains, all in one GroupKey domain.
func (m *Mix) job(s TrainingShape) *Spec {
	pod := min(m.Fit.GPUsPerNode, s.SegmentGPUs)
	root := &Spec{Kind: KindTraining, Name: "job", TopologyKey: m.GroupKey}
	for i := range s.Segments {
		root.Children = append(root.Children, Spec{Name: fmt.Sprintf("seg%d", i), Role: RoleSegment, TopologyKey: m.SegmentKey,
			Pods: s.SegmentGPUs / pod, GPUsPerPod: pod})
	}
	return root
}

// service is an inference tree: frontend, prefill and decode (coupled by
// the rail group "kv") in one SegmentKey domain, or one GroupKey domain.
func (m *Mix) service(s InferenceShape) *Spec {
	key := m.SegmentKey
	if s.InGroup {
		key = m.GroupKey
	}
	return &Spec{Kind: KindInference, Name: "svc", TopologyKey: key, RailCoupling: m.RailCoupling, Children: []Spec{
		{Name: "frontend", Role: RoleFrontend, Pods: 1, GPUsPerPod: s.FrontendGPUs},
		{Name: "prefill", Role: RolePrefill, Pods: s.PrefillPods, GPUsPerPod: s.GPUsPerPod, RailGroup: "kv"},
		{Name: "decode", Role: RoleDecode, Pods: s.DecodePods, GPUsPerPod: s.GPUsPerPod, RailGroup: "kv"},
	}}
}
