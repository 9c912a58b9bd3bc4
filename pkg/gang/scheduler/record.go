package scheduler

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/podstate"
	"github.com/gpufabric/gpufabric/pkg/gang/queue"
)

// A commit record says what a PodGroup commit is about to write. It lives
// in a ConfigMap of the scheduler's own namespace (Config.RecordNamespace),
// named vocab.RecordName(<PodGroup UID>): only the scheduler's identity may write
// there (RBAC, and the chart's admission policy refuses everyone else), so
// no tenant can steer recovery. It is created before the first claim write
// and deleted after the last write; its presence means "a commit of this
// gang may be half done". Recovery still validates it against live objects
// before it acts (see recover.go).
const (
	// recordKey is the ConfigMap data key holding the record's JSON.
	recordKey     = "record"
	recordVersion = 1
	// Bounds of a record: the apiserver stores at most 1 MiB per object.
	maxRecordBytes  = 900 << 10
	maxRecordPods   = 10000
	maxRecordClaims = 4 + 32*maxRecordPods
	maxRecordText   = 256
)

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
	if len(raw) > maxRecordBytes {
		return nil, fmt.Errorf("commit record of %d pods and %d claims is %d bytes, over the limit of %d", len(rec.Pods), len(rec.Claims), len(raw), maxRecordBytes)
	}
	return recordConfigMap(namespace, vocab.RecordName(rec.PodGroup.UID), vocab.LabelCommitRecord, raw), nil
}

// recordConfigMap is a scheduler-owned ConfigMap holding one record
// (commit or nomination) under recordKey.
func recordConfigMap(namespace, name, label string, raw []byte) *v1.ConfigMap {
	return &v1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace,
			Name:      name,
			Labels:    map[string]string{label: "true", "app.kubernetes.io/managed-by": schedulerName},
		},
		Data: map[string]string{recordKey: string(raw)},
	}
}

// decodeStrict decodes the record of a ConfigMap into v: the key must be
// there, at most maxRecordBytes, strict JSON (no unknown fields, no
// trailing data). what names the record in errors.
func decodeStrict(cm *v1.ConfigMap, what string, v any) error {
	raw, ok := cm.Data[recordKey]
	if !ok {
		return fmt.Errorf("no %q key", recordKey)
	}
	if len(raw) > maxRecordBytes {
		return fmt.Errorf("record is %d bytes, over the limit of %d", len(raw), maxRecordBytes)
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("parse %s: %w", what, err)
	}
	if dec.More() {
		return fmt.Errorf("parse %s: trailing data", what)
	}
	return nil
}

// decodeRecord reads and validates the record in a ConfigMap. Rules: the
// JSON is strict (no unknown fields) and bounded, every name is a valid
// Kubernetes name, and the ConfigMap's name matches the PodGroup's UID.
func decodeRecord(cm *v1.ConfigMap) (*commitRecord, error) {
	var rec commitRecord
	if err := decodeStrict(cm, "record", &rec); err != nil {
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
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if r.Version != recordVersion {
		bad("version %d, want %d", r.Version, recordVersion)
	}
	if msgs := validation.IsDNS1123Label(r.PodGroup.Namespace); len(msgs) > 0 {
		bad("podGroup.namespace %q: %s", r.PodGroup.Namespace, strings.Join(msgs, "; "))
	}
	checkName(bad, "podGroup.name", r.PodGroup.Name)
	checkUID(bad, "podGroup.uid", r.PodGroup.UID)
	if len(r.Domain) > maxRecordText || len(r.TopologyKey) > maxRecordText {
		bad("domain or key longer than %d bytes", maxRecordText)
	}
	if len(r.Pods) == 0 || len(r.Pods) > maxRecordPods {
		bad("%d pods, want 1..%d", len(r.Pods), maxRecordPods)
	}
	pods := map[string]bool{}
	for i, p := range r.Pods {
		checkName(bad, fmt.Sprintf("pods[%d].n", i), p.Name)
		checkUID(bad, fmt.Sprintf("pods[%d].u", i), p.UID)
		checkName(bad, fmt.Sprintf("pods[%d].node", i), p.Node)
		if pods[p.Name] {
			bad("pods[%d]: pod %q listed twice", i, p.Name)
		}
		pods[p.Name] = true
	}
	if len(r.Claims) > maxRecordClaims {
		bad("%d claims, over the limit of %d", len(r.Claims), maxRecordClaims)
	}
	claims := map[string]bool{}
	for i, c := range r.Claims {
		checkName(bad, fmt.Sprintf("claims[%d].n", i), c.Name)
		checkUID(bad, fmt.Sprintf("claims[%d].u", i), c.UID)
		if c.Pod != "" && !pods[c.Pod] {
			bad("claims[%d]: pod %q is not in the record", i, c.Pod)
		}
		if c.Allocation != "" && !isFingerprint(c.Allocation) {
			bad("claims[%d].alloc %q is not a fingerprint", i, truncate(c.Allocation, 40))
		}
		if claims[c.Name] {
			bad("claims[%d]: claim %q listed twice", i, c.Name)
		}
		claims[c.Name] = true
	}
	if len(errs) > 8 {
		errs = append(errs[:8], fmt.Errorf("and %d more", len(errs)-8))
	}
	return errors.Join(errs...)
}

func checkName(bad func(string, ...any), field, name string) {
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		bad("%s %q: %s", field, truncate(name, 64), strings.Join(msgs, "; "))
	}
}

func checkUID(bad func(string, ...any), field string, uid types.UID) {
	if uid == "" || len(uid) > 128 || strings.ContainsAny(string(uid), "/\x00") {
		bad("%s %q is not a UID", field, truncate(string(uid), 64))
	}
}

func isFingerprint(s string) bool {
	if len(s) != 32 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// createRecord writes the commit record of a PodGroup commit.
func (s *Scheduler) createRecord(ctx context.Context, rec *commitRecord) (*v1.ConfigMap, error) {
	cm, err := recordObject(s.cfg.RecordNamespace, rec)
	if err != nil {
		return nil, err
	}
	if err := s.gate.Check(gate.StepRecord, rec.PodGroup.Namespace+"/"+rec.PodGroup.Name); err != nil {
		return nil, err
	}
	out, err := s.cfg.Client.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{FieldManager: schedulerName})
	if err != nil {
		return nil, fmt.Errorf("create commit record %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	s.records.put(out)
	return out, nil
}

// deleteRecord removes a commit record (the commit is complete or undone).
// The delete carries the record's UID; a record already gone is fine.
func (s *Scheduler) deleteRecord(ctx context.Context, cm *v1.ConfigMap, object string) error {
	if err := s.gate.Check(gate.StepClearRecord, object); err != nil {
		return err
	}
	err := s.cfg.Client.CoreV1().ConfigMaps(cm.Namespace).Delete(ctx, cm.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cm.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete commit record %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	s.records.remove(cm)
	return nil
}

// isMember reports whether p is a member of pg that this scheduler places.
func isMember(p *v1.Pod, pg *schedulingv1beta1.PodGroup) bool {
	return p != nil && pg != nil && p.Namespace == pg.Namespace && queue.PodGroupName(p) == pg.Name && podstate.Ours(p)
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
