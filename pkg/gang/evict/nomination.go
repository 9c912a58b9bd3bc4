package evict

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/commit"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// A nomination record says that a gang is preempting: which workloads it
// evicts and which nodes are held for it meanwhile. Like a commit record it
// is a ConfigMap of the scheduler's namespace that only the scheduler's
// identity may write, named vocab.NominationName(<gang UID>). It is written
// before the first eviction and deleted once the gang is placed (or gives
// up); a scheduler that restarts in between evicts exactly the victims it
// names, never others, and keeps holding the nodes.
const (
	nominationVersion = 1
	maxNominatedNodes = 10000
)

// nominationRecords is the kind of the nomination records in the record
// store.
var nominationRecords = commit.Kind{
	What: "nomination record", Label: vocab.LabelNomination, Prefix: vocab.NominationPrefix,
	CreateStep: gate.StepNominate, DeleteStep: gate.StepClearNomination, Replace: true,
}

// nominationRecord is the JSON of a nomination record.
type nominationRecord struct {
	Version int `json:"v"`
	// Gang is the preemptor's queue key (pg:<ns>/<name>, pod:<ns>/<name>,
	// or a tree's cpg:<ns>/<root>) and UID (a tree's: its root's).
	Gang     string    `json:"gang"`
	UID      types.UID `json:"uid"`
	Priority int32     `json:"priority"`
	// TopologyKey and Domain where the gang goes.
	TopologyKey string `json:"key"`
	Domain      string `json:"domain"`
	// Nodes held for the gang: gangs of its priority or lower do not use
	// them while the nomination lasts.
	Nodes []string `json:"nodes"`
	// Victims are the pods to evict, with the unit each belongs to.
	Victims []nominatedPod `json:"victims"`
	// Claims are the allocated claims of the victims, freed once they go
	// (the shared claims of whole PodGroups are released by the scheduler).
	Claims  []nominatedClaim `json:"claims,omitempty"`
	Created metav1.Time      `json:"created"`
}

// unitOf returns the unit of the victim pod with uid, "" if the record
// does not name it.
func (r *nominationRecord) unitOf(uid types.UID) string {
	for _, v := range r.Victims {
		if v.UID == uid {
			return v.Unit
		}
	}
	return ""
}

// metav1Now is now as a record stores it (seconds).
func metav1Now() metav1.Time { return metav1.NewTime(time.Now().Truncate(time.Second)) }

type nominatedPod struct {
	Namespace string    `json:"ns"`
	Name      string    `json:"n"`
	UID       types.UID `json:"u"`
	Unit      string    `json:"unit"`
}

type nominatedClaim struct {
	Namespace string    `json:"ns"`
	Name      string    `json:"n"`
	UID       types.UID `json:"u"`
	// Group is the victim PodGroup's UID when the claim is its shared claim.
	Group types.UID `json:"group,omitempty"`
}

func (r *nominationRecord) object(namespace string) (*v1.ConfigMap, error) {
	raw, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode nomination record: %w", err)
	}
	if len(raw) > commit.MaxRecordBytes {
		return nil, fmt.Errorf("nomination record of %d victims is %d bytes, over the limit of %d", len(r.Victims), len(raw), commit.MaxRecordBytes)
	}
	return nominationRecords.Object(namespace, vocab.NominationName(r.UID), raw), nil
}

// decodeNomination reads and validates a nomination record: strict,
// bounded JSON, valid names, and an object name that matches the UID.
func decodeNomination(cm *v1.ConfigMap) (*nominationRecord, error) {
	var r nominationRecord
	if err := commit.Decode(cm, "nomination", &r); err != nil {
		return nil, err
	}
	if err := r.validate(); err != nil {
		return nil, err
	}
	r.Created = metav1.NewTime(r.Created.Truncate(time.Second)) // as it encodes
	if want := vocab.NominationName(r.UID); cm.Name != want {
		return nil, fmt.Errorf("nomination %s names gang UID %q (expected object name %s)", cm.Name, r.UID, want)
	}
	return &r, nil
}

func (r *nominationRecord) validate() error {
	var p commit.Problems
	if r.Version != nominationVersion {
		p.Addf("version %d, want %d", r.Version, nominationVersion)
	}
	checkKey(&p, "gang", r.Gang)
	p.UID("uid", r.UID)
	if len(r.Domain) > commit.MaxRecordText || len(r.TopologyKey) > commit.MaxRecordText {
		p.Addf("domain or key longer than %d bytes", commit.MaxRecordText)
	}
	if len(r.Nodes) == 0 || len(r.Nodes) > maxNominatedNodes {
		p.Addf("%d nodes, want 1..%d", len(r.Nodes), maxNominatedNodes)
	}
	for i, n := range r.Nodes {
		p.Name(fmt.Sprintf("nodes[%d]", i), n)
	}
	if len(r.Victims) == 0 || len(r.Victims) > commit.MaxRecordPods {
		p.Addf("%d victims, want 1..%d", len(r.Victims), commit.MaxRecordPods)
	}
	for i, v := range r.Victims {
		checkNamespace(&p, fmt.Sprintf("victims[%d].ns", i), v.Namespace)
		p.Name(fmt.Sprintf("victims[%d].n", i), v.Name)
		p.UID(fmt.Sprintf("victims[%d].u", i), v.UID)
		checkKey(&p, fmt.Sprintf("victims[%d].unit", i), v.Unit)
	}
	if len(r.Claims) > commit.MaxRecordClaims {
		p.Addf("%d claims, over the limit of %d", len(r.Claims), commit.MaxRecordClaims)
	}
	for i, c := range r.Claims {
		checkNamespace(&p, fmt.Sprintf("claims[%d].ns", i), c.Namespace)
		p.Name(fmt.Sprintf("claims[%d].n", i), c.Name)
		p.UID(fmt.Sprintf("claims[%d].u", i), c.UID)
		if c.Group != "" {
			p.UID(fmt.Sprintf("claims[%d].group", i), c.Group)
		}
	}
	if r.Created.IsZero() {
		p.Addf("no creation time")
	}
	return p.Err()
}

// checkKey validates a queue key: pg:<namespace>/<name>,
// pod:<namespace>/<name> or cpg:<namespace>/<name> (a tree, or a victim
// CompositePodGroup's subtree).
func checkKey(p *commit.Problems, field, key string) {
	if !strings.HasPrefix(key, vocab.PodGroupKeyPrefix) && !strings.HasPrefix(key, vocab.PodKeyPrefix) && !vocab.IsCompositeKey(key) {
		p.Addf("%s %q is not a gang key", field, commit.Shorten(key, 64))
		return
	}
	_, ns, name := vocab.SplitKey(key)
	checkNamespace(p, field+" namespace", ns)
	p.Name(field+" name", name)
}

func checkNamespace(p *commit.Problems, field, ns string) {
	if len(ns) == 0 || len(ns) > 63 {
		p.Addf("%s %q is not a namespace", field, commit.Shorten(ns, 64))
		return
	}
	p.Name(field, ns)
}

// nomination is a live nomination: its record and when its victims were
// last seen all gone.
type nomination struct {
	rec *nominationRecord
	cm  *v1.ConfigMap
	// settled: when every victim pod and claim was first seen gone.
	settled time.Time
	// done: the gang was placed; the record stays until the shared claims
	// of victim groups are released.
	done atomic.Bool
}

// nominationSet holds the live nominations by gang key. Safe for
// concurrent use.
type nominationSet struct {
	mu    sync.Mutex
	byKey map[string]*nomination
}

func newNominationSet() *nominationSet { return &nominationSet{byKey: map[string]*nomination{}} }

func (n *nominationSet) get(key string) *nomination {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.byKey[key]
}

func (n *nominationSet) put(nm *nomination) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.byKey[nm.rec.Gang] = nm
}

func (n *nominationSet) remove(key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.byKey, key)
}

func (n *nominationSet) all() []*nomination {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]*nomination, 0, len(n.byKey))
	for _, nm := range n.byKey {
		out = append(out, nm)
	}
	return out
}

func (n *nominationSet) len() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.byKey)
}

// Load lists the nomination records at the start of a term and returns
// the keys of their gangs (the loop queues them: each gang's next attempt
// carries its preemption on, or ends it). An invalid record is reported
// (event, log) and deleted: it holds no nodes and evicts nothing.
func (e *Evictor) Load(ctx context.Context) ([]string, error) {
	list, err := e.cfg.Store.List(ctx, nominationRecords)
	if err != nil {
		return nil, err
	}
	for _, cm := range list {
		rec, err := decodeNomination(cm)
		if err != nil {
			e.cfg.Store.Reject(ctx, nominationRecords, cm, types.UID(strings.TrimPrefix(cm.Name, vocab.NominationPrefix)), err)
			if err := e.endNomination(ctx, &nomination{rec: &nominationRecord{Gang: cm.Name}, cm: cm}); err != nil {
				return nil, err
			}
			continue
		}
		e.nominations.put(&nomination{rec: rec, cm: cm})
	}
	e.cfg.Metrics.setNominations(e.nominations.len())
	var keys []string
	for _, nm := range e.nominations.all() {
		keys = append(keys, nm.rec.Gang)
	}
	return keys, nil
}

// createNomination writes a nomination record and remembers it. A record
// of the gang an earlier term left (one this term did not load: it was
// invalid) is replaced.
func (e *Evictor) createNomination(ctx context.Context, rec *nominationRecord) (*nomination, error) {
	cm, err := rec.object(e.cfg.Store.Namespace())
	if err != nil {
		return nil, err
	}
	out, err := e.cfg.Store.Create(ctx, nominationRecords, rec.Gang, cm)
	if err != nil {
		return nil, err
	}
	nm := &nomination{rec: rec, cm: out}
	e.nominations.put(nm)
	e.cfg.Metrics.setNominations(e.nominations.len())
	return nm, nil
}

// endNomination deletes a nomination record and forgets it.
func (e *Evictor) endNomination(ctx context.Context, nm *nomination) error {
	if err := e.cfg.Store.Delete(ctx, nominationRecords, nm.rec.Gang, nm.cm); err != nil {
		return err
	}
	e.nominations.remove(nm.rec.Gang)
	e.cfg.Metrics.setNominations(e.nominations.len())
	return nil
}
