package recordwire

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Bounds of a record; a commit record's objects are bounded by its
// store (pkg/gang/commit).
const (
	// MaxPods bounds the pods a record names.
	MaxPods = 10000
	// MaxClaims bounds the claims a record names.
	MaxClaims = 4 + 32*MaxPods
	// MaxGroups bounds the leaf PodGroups a tree's record names:
	// the most a Workload's templates describe (at most 8 PodGroup and 8
	// CompositePodGroup templates per composite, composites at most 3
	// levels deep): 8 + 8·(8 + 8·8). A tree's pods and claims, all leaves
	// together, stay under MaxPods and MaxClaims.
	MaxGroups = maxTemplates * (1 + maxTemplates*(1+maxTemplates))
	// maxTemplates is the API's bound on a composite's PodGroup (and
	// CompositePodGroup) templates.
	maxTemplates = 8
	// MaxText bounds a record's free text (a domain, a topology key).
	MaxText = 256
)

// Kinds of a commit's root (Root.Kind).
const (
	// KindPodGroup: a flat gang, its record named by its PodGroup.
	KindPodGroup = "PodGroup"
	// KindCompositePodGroup: a tree (scheduling.k8s.io/v1alpha3
	// CompositePodGroup), its record named by the root CompositePodGroup;
	// its leaves are PodGroups of the root's namespace.
	KindCompositePodGroup = "CompositePodGroup"
)

// Root is what a commit is recorded under: the PodGroup of a flat gang, or
// the root CompositePodGroup of a tree, whose placed leaf PodGroups commit
// as one transaction (Committer.BeginTree).
type Root struct {
	Kind      string
	Namespace string
	Name      string
	UID       types.UID
}

// key is "namespace/name".
func (r Root) Key() string { return r.Namespace + "/" + r.Name }

// String is "podgroup ns/name" or "compositepodgroup ns/name".
func (r Root) String() string { return strings.ToLower(r.Kind) + " " + r.Key() }

// Record is a commit record, decoded.
type Record struct {
	Version int
	// Root names the record: the PodGroup (KindPodGroup, versions 1 and
	// 2) or the root CompositePodGroup of a tree (version 3).
	Root Root
	// Groups are the leaf PodGroups the commit places, each with where it
	// goes (for events and humans); one, the root itself, for a flat gang.
	Groups []Group
	// Pods: every member being bound, with its node and its group.
	Pods []Pod
	// Claims the commit writes, each once.
	Claims []Claim
}

type Group struct {
	Namespace string
	Name      string
	UID       types.UID
	// Domain and TopologyKey where the group goes.
	Domain      string
	TopologyKey string
}

type Pod struct {
	Name string
	UID  types.UID
	Node string
	// Group is the index of the pod's PodGroup in Groups.
	Group int
}

type Claim struct {
	Name string
	UID  types.UID
	// Pods are the members the claim is reserved for, each a pod of the
	// record: one for a member's own claim, several for a claim the
	// members share by name; none for a PodGroup claim (reserved for the
	// PodGroup).
	Pods []string
	// Groups are the indices of the PodGroups of a tree the claim is
	// reserved for (its leaves' PodGroup claims). None in a flat gang's
	// record, whose one PodGroup stands for every claim (versions 1 and
	// 2): its roll-back removes the PodGroup's reservation from every
	// claim of the record.
	Groups []int
	// Allocation is the fingerprint of the allocation the commit writes;
	// "" when the commit only adds reservations to an allocated claim.
	Allocation string
}

// Tree reports whether the record is a tree's (version 3).
func (r *Record) Tree() bool { return r.Root.Kind == KindCompositePodGroup }

// Validate checks a record's shape: decoded, or before it is written.
func (r *Record) Validate() error {
	var p Problems
	root := "podGroup"
	switch {
	case r.Version != Version1 && r.Version != Version2 && r.Version != VersionTree:
		p.Addf("version %d, want %d, %d or %d", r.Version, Version1, Version2, VersionTree)
	case (r.Version == VersionTree) != r.Tree():
		p.Addf("version %d with a root of kind %q", r.Version, Shorten(r.Root.Kind, 40))
	}
	if r.Tree() {
		root = "root"
	}
	if msgs := validation.IsDNS1123Label(r.Root.Namespace); len(msgs) > 0 {
		p.Addf("%s.namespace %q: %s", root, Shorten(r.Root.Namespace, 64), strings.Join(msgs, "; "))
	}
	p.Name(root+".name", r.Root.Name)
	p.UID(root+".uid", r.Root.UID)
	r.validateGroups(&p)
	pods := r.validatePods(&p)
	r.validateClaims(&p, pods)
	return p.Err()
}

// validateGroups checks the leaf PodGroups: a flat record's one group is
// its root; a tree's are 1..MaxGroups distinct PodGroups of the
// root's namespace.
func (r *Record) validateGroups(p *Problems) {
	text := func(g Group) bool { return len(g.Domain) > MaxText || len(g.TopologyKey) > MaxText }
	if !r.Tree() {
		switch {
		case len(r.Groups) != 1:
			p.Addf("%d groups in the record of a podgroup, want 1", len(r.Groups))
		case r.Groups[0].Namespace != r.Root.Namespace || r.Groups[0].Name != r.Root.Name || r.Groups[0].UID != r.Root.UID:
			p.Addf("the group of a podgroup's record is not the podgroup")
		case text(r.Groups[0]):
			p.Addf("domain or key longer than %d bytes", MaxText)
		}
		return
	}
	if len(r.Groups) == 0 || len(r.Groups) > MaxGroups {
		p.Addf("%d groups, want 1..%d", len(r.Groups), MaxGroups)
		return
	}
	names := make(map[string]bool, len(r.Groups))
	uids := make(map[types.UID]bool, len(r.Groups))
	for i, g := range r.Groups {
		if g.Namespace != r.Root.Namespace {
			p.Addf("groups[%d].namespace %q is not the root's", i, Shorten(g.Namespace, 64))
		}
		p.nameAt("groups", i, "name", g.Name)
		p.uidAt("groups", i, "uid", g.UID)
		switch {
		case g.UID == r.Root.UID:
			p.Addf("groups[%d]: uid %q is the root's", i, Shorten(string(g.UID), 64))
		case names[g.Name] || uids[g.UID]:
			p.Addf("groups[%d]: podgroup %q listed twice", i, Shorten(g.Name, 64))
		}
		names[g.Name], uids[g.UID] = true, true
		if text(g) {
			p.Addf("groups[%d]: domain or key longer than %d bytes", i, MaxText)
		}
	}
}

// validatePods checks the pods (1..MaxPods, each once, each in a
// group, every group with one at least) and returns their names.
func (r *Record) validatePods(p *Problems) map[string]bool {
	if len(r.Pods) == 0 || len(r.Pods) > MaxPods {
		p.Addf("%d pods, want 1..%d", len(r.Pods), MaxPods)
	}
	pods := make(map[string]bool, min(len(r.Pods), MaxPods))
	perGroup := make([]int, len(r.Groups))
	for i, rp := range r.Pods {
		p.nameAt("pods", i, "n", rp.Name)
		p.uidAt("pods", i, "u", rp.UID)
		p.nameAt("pods", i, "node", rp.Node)
		if pods[rp.Name] {
			p.Addf("pods[%d]: pod %q listed twice", i, rp.Name)
		}
		pods[rp.Name] = true
		if rp.Group < 0 || rp.Group >= len(r.Groups) {
			p.Addf("pods[%d].g: group %d of %d", i, rp.Group, len(r.Groups))
			continue
		}
		perGroup[rp.Group]++
	}
	for g, n := range perGroup {
		if n == 0 && len(r.Pods) > 0 {
			p.Addf("groups[%d] (%s) has no pod", g, Shorten(r.Groups[g].Name, 64))
		}
	}
	return pods
}

// validateClaims checks the claims: each once, its pods in the record,
// its groups in range and each once (none in a flat record's), a tree's
// reserved for some pod or group.
func (r *Record) validateClaims(p *Problems, pods map[string]bool) {
	if len(r.Claims) > MaxClaims {
		p.Addf("%d claims, over the limit of %d", len(r.Claims), MaxClaims)
	}
	claims := map[string]bool{}
	seen := make([]bool, len(r.Groups)) // a claim's groups, reset after each
	for i, c := range r.Claims {
		p.nameAt("claims", i, "n", c.Name)
		p.uidAt("claims", i, "u", c.UID)
		users := make(map[string]bool, len(c.Pods))
		for _, pod := range c.Pods {
			switch {
			case !pods[pod]:
				p.Addf("claims[%d]: pod %q is not in the record", i, Shorten(pod, 64))
			case users[pod]:
				p.Addf("claims[%d]: pod %q listed twice", i, pod)
			}
			users[pod] = true
		}
		for _, g := range c.Groups {
			switch {
			case g < 0 || g >= len(r.Groups):
				p.Addf("claims[%d].g: group %d of %d", i, g, len(r.Groups))
			case seen[g]:
				p.Addf("claims[%d].g: group %d listed twice", i, g)
			default:
				seen[g] = true
			}
		}
		for _, g := range c.Groups {
			if g >= 0 && g < len(seen) {
				seen[g] = false
			}
		}
		switch {
		case !r.Tree() && len(c.Groups) > 0:
			p.Addf("claims[%d].g: %d groups in the record of a podgroup", i, len(c.Groups))
		case r.Tree() && len(c.Pods) == 0 && len(c.Groups) == 0:
			p.Addf("claims[%d]: reserved for no pod and no group", i)
		}
		if c.Allocation != "" && !isFingerprint(c.Allocation) {
			p.Addf("claims[%d].alloc %q is not a fingerprint", i, Shorten(c.Allocation, 40))
		}
		if claims[c.Name] {
			p.Addf("claims[%d]: claim %q listed twice", i, c.Name)
		}
		claims[c.Name] = true
	}
}

// nameAt is Name for field f of entry i of a list; the field's name is
// only formatted for a problem (a record lists up to 10,000 pods).
func (p *Problems) nameAt(list string, i int, f, name string) {
	if len(validation.IsDNS1123Subdomain(name)) > 0 {
		p.Name(fmt.Sprintf("%s[%d].%s", list, i, f), name)
	}
}

// uidAt is UID for field f of entry i of a list.
func (p *Problems) uidAt(list string, i int, f string, uid types.UID) {
	if !isUID(uid) {
		p.UID(fmt.Sprintf("%s[%d].%s", list, i, f), uid)
	}
}

func isFingerprint(s string) bool {
	if len(s) != 32 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// Problems collects what is wrong with a decoded record while it is
// validated; Err names the first eight.
type Problems []error

// Addf adds a problem.
func (p *Problems) Addf(format string, args ...any) { *p = append(*p, fmt.Errorf(format, args...)) }

// Name adds a problem unless name is a valid Kubernetes object name (a DNS
// subdomain).
func (p *Problems) Name(field, name string) {
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		p.Addf("%s %q: %s", field, Shorten(name, 64), strings.Join(msgs, "; "))
	}
}

// UID adds a problem unless uid looks like a UID.
func (p *Problems) UID(field string, uid types.UID) {
	if !isUID(uid) {
		p.Addf("%s %q is not a UID", field, Shorten(string(uid), 64))
	}
}

func isUID(uid types.UID) bool {
	return uid != "" && len(uid) <= 128 && !strings.ContainsAny(string(uid), "/\x00")
}

// Err joins the problems (the first eight, and how many more), nil for
// none.
func (p Problems) Err() error {
	errs := []error(p)
	if len(errs) > 8 {
		errs = append(errs[:8], fmt.Errorf("and %d more", len(errs)-8))
	}
	return errors.Join(errs...)
}

// Shorten cuts s to n bytes followed by "..." for logs and errors.
func Shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
