package trees

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"

	"github.com/gpufabric/gpufabric/pkg/gang/composite"
)

// MaxLeaves bounds the PodGroups of one tree (8 children per level over
// three composite levels, as Workload templates make them, fit).
const MaxLeaves = 512

// ErrInvalid marks a tree that cannot be placed as it is written.
var ErrInvalid = errors.New("invalid CompositePodGroup tree")

// ErrMissing marks a tree with a parent that does not exist (yet).
var ErrMissing = errors.New("CompositePodGroup tree incomplete")

// ParentIndex is the informers' index of PodGroups and CompositePodGroups
// by "namespace/parentName"; IndexByParent computes it.
const ParentIndex = "gpufabric.dev/parent-composite"

// IndexByParent indexes PodGroups and CompositePodGroups by their parent.
func IndexByParent(obj any) ([]string, error) {
	switch o := obj.(type) {
	case *schedulingv1beta1.PodGroup:
		if p := o.Spec.ParentCompositePodGroupName; p != nil {
			return []string{o.Namespace + "/" + *p}, nil
		}
	case *schedulingv1alpha3.CompositePodGroup:
		if p := o.Spec.ParentCompositePodGroupName; p != nil {
			return []string{o.Namespace + "/" + *p}, nil
		}
	}
	return nil, nil
}

// Composites gets a CompositePodGroup (the lister's Get).
type Composites interface {
	Get(namespace, name string) (*schedulingv1alpha3.CompositePodGroup, error)
}

// Reader reads trees from the informers' indexers.
type Reader struct {
	Composites Composites
	// CompositeChildren and PodGroupChildren are the informers' indexers
	// with ParentIndex.
	CompositeChildren cache.Indexer
	PodGroupChildren  cache.Indexer
}

// Node is one group of a tree: a CompositePodGroup with children, or a
// leaf PodGroup.
type Node struct {
	Composite *schedulingv1alpha3.CompositePodGroup
	PodGroup  *schedulingv1beta1.PodGroup
	Children  []*Node
}

// Name is "CompositePodGroup/<name>" or "PodGroup/<name>".
func (n *Node) Name() string {
	if n.PodGroup != nil {
		return "PodGroup/" + n.PodGroup.Name
	}
	return "CompositePodGroup/" + n.Composite.Name
}

// Tree is a root and what is under it.
type Tree struct {
	Root   *Node
	Leaves []*Node // in tree order
}

// RootOf returns the name of the root CompositePodGroup above a group
// whose parent is parent (in namespace), walking up at most
// composite.MaxDepth levels.
func (r *Reader) RootOf(namespace, parent string) (string, error) {
	seen := []string{}
	name := parent
	for range composite.MaxDepth {
		if slices.Contains(seen, name) {
			return "", fmt.Errorf("%w: CompositePodGroup %s/%s: spec.parentCompositePodGroupName makes a cycle (%s)", ErrInvalid, namespace, name, strings.Join(append(seen, name), " → "))
		}
		seen = append(seen, name)
		c, err := r.Composites.Get(namespace, name)
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("%w: CompositePodGroup %s/%s does not exist", ErrMissing, namespace, name)
		}
		if err != nil {
			return "", err
		}
		if c.Spec.ParentCompositePodGroupName == nil {
			return name, nil
		}
		name = *c.Spec.ParentCompositePodGroupName
	}
	return "", fmt.Errorf("%w: CompositePodGroup %s/%s: more than %d levels of spec.parentCompositePodGroupName above it", ErrInvalid, namespace, parent, composite.MaxDepth)
}

// Read reads the tree under the root CompositePodGroup, checking the
// package's bounds.
func (r *Reader) Read(root *schedulingv1alpha3.CompositePodGroup) (*Tree, error) {
	t := &Tree{}
	workload := workloadOf(root.Spec.WorkloadRef)
	var walk func(c *schedulingv1alpha3.CompositePodGroup, depth int) (*Node, error)
	walk = func(c *schedulingv1alpha3.CompositePodGroup, depth int) (*Node, error) {
		n := &Node{Composite: c}
		if depth >= composite.MaxDepth {
			return nil, fmt.Errorf("%w: %s/%s: composites deeper than %d levels (a tree has at most %d levels with its PodGroups)", ErrInvalid, c.Namespace, n.Name(), composite.MaxDepth-1, composite.MaxDepth)
		}
		if w := workloadOf(c.Spec.WorkloadRef); w != workload {
			return nil, fmt.Errorf("%w: %s/%s: spec.workloadRef names workload %q, its root %q: a tree belongs to one Workload", ErrInvalid, c.Namespace, n.Name(), w, workload)
		}
		kids, err := r.children(c)
		if err != nil {
			return nil, err
		}
		for _, k := range kids.composites {
			child, err := walk(k, depth+1)
			if err != nil {
				return nil, err
			}
			n.Children = append(n.Children, child)
		}
		for _, pg := range kids.podGroups {
			if w := podGroupWorkload(pg.Spec.WorkloadRef); w != workload {
				return nil, fmt.Errorf("%w: %s/PodGroup/%s: spec.workloadRef names workload %q, its root %q: a tree belongs to one Workload", ErrInvalid, pg.Namespace, pg.Name, w, workload)
			}
			leaf := &Node{PodGroup: pg}
			n.Children = append(n.Children, leaf)
			if t.Leaves = append(t.Leaves, leaf); len(t.Leaves) > MaxLeaves {
				return nil, fmt.Errorf("%w: %s/%s: more than %d PodGroups in the tree", ErrInvalid, root.Namespace, "CompositePodGroup/"+root.Name, MaxLeaves)
			}
		}
		return n, nil
	}
	var err error
	t.Root, err = walk(root, 1)
	return t, err
}

// children are a composite's child groups, sorted by creation, then name
// (kube-scheduler's order).
type children struct {
	composites []*schedulingv1alpha3.CompositePodGroup
	podGroups  []*schedulingv1beta1.PodGroup
}

func (r *Reader) children(c *schedulingv1alpha3.CompositePodGroup) (children, error) {
	key := c.Namespace + "/" + c.Name
	var out children
	objs, err := r.CompositeChildren.ByIndex(ParentIndex, key)
	if err != nil {
		return out, err
	}
	for _, o := range objs {
		if k, ok := o.(*schedulingv1alpha3.CompositePodGroup); ok {
			out.composites = append(out.composites, k)
		}
	}
	if objs, err = r.PodGroupChildren.ByIndex(ParentIndex, key); err != nil {
		return out, err
	}
	for _, o := range objs {
		if pg, ok := o.(*schedulingv1beta1.PodGroup); ok {
			out.podGroups = append(out.podGroups, pg)
		}
	}
	if n := len(out.composites) + len(out.podGroups); n > composite.MaxChildren {
		return out, fmt.Errorf("%w: %s/CompositePodGroup/%s: %d children, at most %d", ErrInvalid, c.Namespace, c.Name, n, composite.MaxChildren)
	}
	slices.SortFunc(out.composites, func(a, b *schedulingv1alpha3.CompositePodGroup) int {
		return compareCreated(a.CreationTimestamp.Time.UnixNano(), b.CreationTimestamp.Time.UnixNano(), a.Name, b.Name)
	})
	slices.SortFunc(out.podGroups, func(a, b *schedulingv1beta1.PodGroup) int {
		return compareCreated(a.CreationTimestamp.Time.UnixNano(), b.CreationTimestamp.Time.UnixNano(), a.Name, b.Name)
	})
	return out, nil
}

func compareCreated(a, b int64, na, nb string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return strings.Compare(na, nb)
}

// workloadOf names the Workload a composite belongs to ("" none).
func workloadOf(ref *schedulingv1alpha3.WorkloadReference) string {
	if ref == nil {
		return ""
	}
	return ref.WorkloadName
}

// podGroupWorkload names the Workload a PodGroup belongs to ("" none).
func podGroupWorkload(ref *schedulingv1beta1.WorkloadReference) string {
	if ref == nil {
		return ""
	}
	return ref.WorkloadName
}
