package freeroom

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Where the view is published: a ConfigMap of this name in the
// scheduler's namespace, the JSON of a View under DataKey.
const (
	ConfigMapName = "gpufabric-free-room"
	DataKey       = "view.json"
)

// Version is the View format written; readers refuse a newer one.
const Version = 1

// Bounds of a view, whatever the cluster's size.
const (
	// DefaultTopK domains per level are listed by name (most free first).
	DefaultTopK = 20
	// MaxTopK bounds Options.TopK.
	MaxTopK = 100
	// MaxLevels bounds the levels listed (NVLink domain and the label
	// levels; the cluster is the view's totals).
	MaxLevels = 16
	// maxThresholds bounds a level's AtLeast counts (powers of two up to
	// its largest domain, 2^23 GPUs at most).
	maxThresholds = 24
	// MaxBytes bounds the encoded view; domain ids are at most 64
	// characters (attribute and label values), so a view of MaxLevels
	// levels of MaxTopK domains stays below it.
	MaxBytes = 512 << 10
)

// View is what a tenant without cluster-wide rights may read of the free
// room: counts of GPUs per fabric domain and the time they were taken.
// It names fabric domains only: no namespace, workload or per-tenant
// count.
type View struct {
	Version int `json:"version"`
	// Time the scheduler took the counts.
	Time time.Time `json:"time"`
	// GPUs and FreeGPUs of the whole cluster.
	GPUs     int `json:"gpus"`
	FreeGPUs int `json:"freeGPUs"`
	// Levels from the NVLink domain outwards.
	Levels []Level `json:"levels"`
	// Spares the scheduler keeps for replacements, when it keeps any:
	// their GPUs are counted neither free here nor in any level.
	Spares *Spares `json:"spares,omitempty"`
}

// Level is one level of the fabric tree.
type Level struct {
	// Key is the topology key: gpufabric.dev/nvlinkDomain or a node label.
	Key string `json:"key"`
	// Domains of the level with GPUs, and their free GPUs in all.
	Domains  int `json:"domains"`
	FreeGPUs int `json:"freeGPUs"`
	// LargestFree is the most free GPUs of one domain: the largest gang
	// one domain of this level could take.
	LargestFree int `json:"largestFree"`
	// AtLeast counts the domains with at least GPUs free, for GPUs = 1,
	// 2, 4, … up to the level's largest domain.
	AtLeast []Count `json:"atLeast"`
	// Top lists up to TopK domains, most free first (then most GPUs, then
	// by id); Omitted counts the others.
	Top     []Domain `json:"top"`
	Omitted int      `json:"omitted"`
}

// Count is the number of domains with at least GPUs free.
type Count struct {
	GPUs    int `json:"gpus"`
	Domains int `json:"domains"`
}

// Domain is one fabric domain's GPUs and free GPUs.
type Domain struct {
	ID   string `json:"id"`
	GPUs int    `json:"gpus"`
	Free int    `json:"free"`
}

// Options of Build.
type Options struct {
	// TopK domains listed per level; DefaultTopK when 0, at most MaxTopK.
	TopK int
}

// Build makes the view of tree (its levels and GPUs per domain) with free,
// the free GPUs per NVLink domain, taken at now. Rules: a domain of a
// level above the NVLink domain has the free GPUs of the NVLink domains
// linked below it (an NVLink domain counts in the domain of its first
// node, as the tree links it); domains without GPUs are left out; a free
// count is clamped to 0..GPUs; the cluster level gives the totals.
func Build(tree *topology.Tree, free map[string]int, now time.Time, o Options) *View {
	k := o.TopK
	if k <= 0 {
		k = DefaultTopK
	}
	k = min(k, MaxTopK)
	v := &View{Version: Version, Time: now.UTC().Truncate(time.Second), Levels: []Level{}}
	if tree == nil || len(tree.Levels) == 0 {
		return v
	}
	sums := map[*topology.Domain]int{}
	for _, d := range tree.Levels[0].Domains {
		n := max(0, min(free[d.ID], d.GPUs))
		for p := d; p != nil; p = p.Parent {
			sums[p] += n
		}
	}
	for _, l := range tree.Levels {
		if l.Key == topology.TopologyKeyCluster {
			for _, d := range l.Domains {
				v.GPUs, v.FreeGPUs = d.GPUs, min(sums[d], d.GPUs)
			}
			continue
		}
		if len(v.Levels) < MaxLevels {
			v.Levels = append(v.Levels, level(l, sums, k))
		}
	}
	return v
}

func level(l *topology.Level, sums map[*topology.Domain]int, k int) Level {
	out := Level{Key: l.Key, AtLeast: []Count{}, Top: []Domain{}}
	var all []Domain
	largestGPUs := 0
	for _, d := range l.Domains {
		if d.GPUs == 0 {
			continue
		}
		n := min(sums[d], d.GPUs)
		all = append(all, Domain{ID: d.ID, GPUs: d.GPUs, Free: n})
		out.FreeGPUs += n
		out.LargestFree = max(out.LargestFree, n)
		largestGPUs = max(largestGPUs, d.GPUs)
	}
	out.Domains = len(all)
	for t := 1; t <= largestGPUs && len(out.AtLeast) < maxThresholds; t *= 2 {
		c := Count{GPUs: t}
		for _, d := range all {
			if d.Free >= t {
				c.Domains++
			}
		}
		out.AtLeast = append(out.AtLeast, c)
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if a.Free != b.Free {
			return a.Free > b.Free
		}
		if a.GPUs != b.GPUs {
			return a.GPUs > b.GPUs
		}
		return a.ID < b.ID
	})
	n := min(k, len(all))
	out.Top = append(out.Top, all[:n]...)
	out.Omitted = len(all) - n
	return out
}

// SameCounts reports whether a and b differ at most in their time.
func SameCounts(a, b *View) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	x.Time, y.Time = time.Time{}, time.Time{}
	ja, errA := json.Marshal(x)
	jb, errB := json.Marshal(y)
	return errA == nil && errB == nil && string(ja) == string(jb)
}

// Encode returns the view's JSON; an error when it passes MaxBytes.
func Encode(v *View) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode free-room view: %w", err)
	}
	if len(data) > MaxBytes {
		return nil, fmt.Errorf("free-room view of %d bytes passes %d", len(data), MaxBytes)
	}
	return data, nil
}

// ErrNoView: the ConfigMap holds no view under DataKey.
var ErrNoView = errors.New("no free-room view in the ConfigMap")

// Decode reads the view of a ConfigMap; it refuses data past MaxBytes and
// a version newer than Version.
func Decode(cm *corev1.ConfigMap) (*View, error) {
	data, ok := cm.Data[DataKey]
	if !ok {
		return nil, ErrNoView
	}
	if len(data) > MaxBytes {
		return nil, fmt.Errorf("free-room view of %d bytes passes %d", len(data), MaxBytes)
	}
	v := &View{}
	if err := json.Unmarshal([]byte(data), v); err != nil {
		return nil, fmt.Errorf("decode free-room view: %w", err)
	}
	if v.Version > Version {
		return nil, fmt.Errorf("free-room view version %d is newer than this reader's %d: update kubectl-gpufabric", v.Version, Version)
	}
	return v, nil
}
