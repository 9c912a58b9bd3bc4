package commit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/podstate"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// A commit record says what a PodGroup commit is about to write. It lives
// in the record Store, named vocab.RecordName(<PodGroup UID>). It is
// created before the first claim write and deleted after the last write;
// its presence means "a commit of this gang may be half done". Recovery
// still validates it against live objects before it acts (recover.go).
const recordVersion = 1

// commitRecord is the JSON of a commit record.
type commitRecord struct {
	Version  int         `json:"v"`
	PodGroup recordGroup `json:"podGroup"`
	// Domain and TopologyKey where the gang goes, for events and humans.
	Domain      string `json:"domain"`
	TopologyKey string `json:"key,omitempty"`
	// Pods: every member being bound, with its node.
	Pods []recordPod `json:"pods"`
	// Claims the commit writes.
	Claims []recordClaim `json:"claims"`
}

type recordGroup struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
}

type recordPod struct {
	Name string    `json:"n"`
	UID  types.UID `json:"u"`
	Node string    `json:"node"`
}

type recordClaim struct {
	Name string    `json:"n"`
	UID  types.UID `json:"u"`
	// Pod is the member the claim is reserved for; "" for a shared claim
	// (reserved for the PodGroup).
	Pod string `json:"pod,omitempty"`
	// Allocation is the fingerprint of the allocation the commit writes;
	// "" when the commit only adds a reservation to an allocated claim.
	Allocation string `json:"alloc,omitempty"`
}

// newRecord describes a commit of decision d for pg with the given claim
// writes.
func newRecord(pg *schedulingv1beta1.PodGroup, d *placement.Decision, writes []claimWrite) *commitRecord {
	rec := &commitRecord{
		Version:     recordVersion,
		PodGroup:    recordGroup{Namespace: pg.Namespace, Name: pg.Name, UID: pg.UID},
		Domain:      d.Domain,
		TopologyKey: d.TopologyKey,
		Pods:        make([]recordPod, 0, len(d.Pods)),
		Claims:      make([]recordClaim, 0, len(writes)),
	}
	for _, p := range d.Pods {
		rec.Pods = append(rec.Pods, recordPod{Name: p.Name, UID: p.UID, Node: p.Node})
	}
	for _, w := range writes {
		rc := recordClaim{Name: w.claim.Name, UID: w.claim.UID}
		if w.consumer.Resource == "pods" {
			rc.Pod = w.consumer.Name
		}
		if w.alloc != nil {
			rc.Allocation = AllocationFingerprint(w.alloc)
		}
		rec.Claims = append(rec.Claims, rc)
	}
	return rec
}

// AllocationFingerprint identifies the devices of an allocation, as commit
// records store it: a hash of its results' request, driver, pool and
// device, in order.
func AllocationFingerprint(a *resourceapi.AllocationResult) string {
	h := sha256.New()
	for _, r := range a.Devices.Results {
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00", r.Request, r.Driver, r.Pool, r.Device)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// recordObject is the ConfigMap that stores rec.
func recordObject(namespace string, rec *commitRecord) (*v1.ConfigMap, error) {
	raw, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encode commit record: %w", err)
	}
	if len(raw) > MaxRecordBytes {
		return nil, fmt.Errorf("commit record of %d pods and %d claims is %d bytes, over the limit of %d", len(rec.Pods), len(rec.Claims), len(raw), MaxRecordBytes)
	}
	return CommitRecords.Object(namespace, vocab.RecordName(rec.PodGroup.UID), raw), nil
}

// decodeRecord reads and validates the record in a ConfigMap. Rules: the
// JSON is strict (no unknown fields) and bounded, every name is a valid
// Kubernetes name, and the ConfigMap's name matches the PodGroup's UID.
func decodeRecord(cm *v1.ConfigMap) (*commitRecord, error) {
	var rec commitRecord
	if err := Decode(cm, "record", &rec); err != nil {
		return nil, err
	}
	if err := rec.validate(); err != nil {
		return nil, err
	}
	if want := vocab.RecordName(rec.PodGroup.UID); cm.Name != want {
		return nil, fmt.Errorf("record %s names podgroup UID %q (expected object name %s)", cm.Name, rec.PodGroup.UID, want)
	}
	return &rec, nil
}

// validate checks a decoded record's shape.
func (r *commitRecord) validate() error {
	var p Problems
	if r.Version != recordVersion {
		p.Addf("version %d, want %d", r.Version, recordVersion)
	}
	if msgs := validation.IsDNS1123Label(r.PodGroup.Namespace); len(msgs) > 0 {
		p.Addf("podGroup.namespace %q: %s", r.PodGroup.Namespace, strings.Join(msgs, "; "))
	}
	p.Name("podGroup.name", r.PodGroup.Name)
	p.UID("podGroup.uid", r.PodGroup.UID)
	if len(r.Domain) > MaxRecordText || len(r.TopologyKey) > MaxRecordText {
		p.Addf("domain or key longer than %d bytes", MaxRecordText)
	}
	if len(r.Pods) == 0 || len(r.Pods) > MaxRecordPods {
		p.Addf("%d pods, want 1..%d", len(r.Pods), MaxRecordPods)
	}
	pods := map[string]bool{}
	for i, rp := range r.Pods {
		p.Name(fmt.Sprintf("pods[%d].n", i), rp.Name)
		p.UID(fmt.Sprintf("pods[%d].u", i), rp.UID)
		p.Name(fmt.Sprintf("pods[%d].node", i), rp.Node)
		if pods[rp.Name] {
			p.Addf("pods[%d]: pod %q listed twice", i, rp.Name)
		}
		pods[rp.Name] = true
	}
	if len(r.Claims) > MaxRecordClaims {
		p.Addf("%d claims, over the limit of %d", len(r.Claims), MaxRecordClaims)
	}
	claims := map[string]bool{}
	for i, c := range r.Claims {
		p.Name(fmt.Sprintf("claims[%d].n", i), c.Name)
		p.UID(fmt.Sprintf("claims[%d].u", i), c.UID)
		if c.Pod != "" && !pods[c.Pod] {
			p.Addf("claims[%d]: pod %q is not in the record", i, c.Pod)
		}
		if c.Allocation != "" && !isFingerprint(c.Allocation) {
			p.Addf("claims[%d].alloc %q is not a fingerprint", i, Shorten(c.Allocation, 40))
		}
		if claims[c.Name] {
			p.Addf("claims[%d]: claim %q listed twice", i, c.Name)
		}
		claims[c.Name] = true
	}
	return p.Err()
}

func isFingerprint(s string) bool {
	if len(s) != 32 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// isMember reports whether p is a member of pg that this scheduler places.
func isMember(p *v1.Pod, pg *schedulingv1beta1.PodGroup) bool {
	return p != nil && pg != nil && p.Namespace == pg.Namespace && podGroupName(p) == pg.Name && podstate.Ours(p)
}

// podGroupName is the PodGroup a pod names, "" for none.
func podGroupName(p *v1.Pod) string {
	if p.Spec.SchedulingGroup == nil || p.Spec.SchedulingGroup.PodGroupName == nil {
		return ""
	}
	return *p.Spec.SchedulingGroup.PodGroupName
}

// recordSet holds the commit records this term knows of, by PodGroup UID:
// those listed at the start of the term and those it wrote since. Only the
// leader writes records, so the set is exact while it leads. Safe for
// concurrent use.
type recordSet struct {
	mu    sync.Mutex
	byUID map[types.UID]*v1.ConfigMap
}

func newRecordSet() *recordSet { return &recordSet{byUID: map[types.UID]*v1.ConfigMap{}} }

func recordUID(cm *v1.ConfigMap) types.UID {
	return types.UID(strings.TrimPrefix(cm.Name, vocab.RecordPrefix))
}

func (r *recordSet) put(cm *v1.ConfigMap) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byUID[recordUID(cm)] = cm
}

func (r *recordSet) remove(cm *v1.ConfigMap) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur := r.byUID[recordUID(cm)]; cur != nil && cur.UID == cm.UID {
		delete(r.byUID, recordUID(cm))
	}
}

// get returns the record of the PodGroup with uid, nil if none.
func (r *recordSet) get(uid types.UID) *v1.ConfigMap {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byUID[uid]
}
