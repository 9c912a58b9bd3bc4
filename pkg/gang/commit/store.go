package commit

import (
	"context"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/commit/recordwire"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// The scheduler's records (commit records, nomination records) are
// ConfigMaps of its own namespace (Config.RecordNamespace) that only its
// identity may write (RBAC, and the chart's admission policy refuses
// everyone else), so no tenant can steer what it does with them. Each holds
// one JSON document under RecordKey; the bounds below keep every object
// under the apiserver's 1 MiB. A commit record larger than one object is
// stored in parts (chunks.go).
const (
	// RecordKey is the ConfigMap data key holding a record's JSON.
	RecordKey = "record"
	// MaxRecordBytes bounds the JSON one object holds: a record, or one
	// part of a commit record (MaxRecordChunks parts at most).
	MaxRecordBytes = 900 << 10
	// MaxRecordPods bounds the pods a record names.
	MaxRecordPods = recordwire.MaxPods
	// MaxRecordClaims bounds the claims a record names.
	MaxRecordClaims = recordwire.MaxClaims
	// MaxRecordGroups bounds the leaf PodGroups a tree's record names.
	MaxRecordGroups = recordwire.MaxGroups
	// MaxRecordText bounds a record's free text (a domain, a topology key).
	MaxRecordText = recordwire.MaxText
)

// Kind is one kind of record: its name in errors and events, its label and
// name prefix, and the gate steps of its writes.
type Kind struct {
	// What names the kind: "commit record".
	What   string
	Label  string
	Prefix string
	// PartLabel marks the further parts of a record too large for one
	// object (chunks.go); "": the kind's records are one object each.
	PartLabel string
	// CreateStep and DeleteStep are checked at the gate before the writes.
	CreateStep, DeleteStep gate.Step
	// Replace: a create that finds a record of the same name (one an
	// earlier term left and this one did not load) deletes it and creates
	// again, instead of failing.
	Replace bool
}

// CommitRecords is the kind of the commit records (record.go).
var CommitRecords = Kind{
	What: "commit record", Label: vocab.LabelCommitRecord, Prefix: vocab.RecordPrefix, PartLabel: vocab.LabelCommitRecordPart,
	CreateStep: gate.StepRecord, DeleteStep: gate.StepClearRecord,
}

// Object is the scheduler-owned ConfigMap of this kind holding one record,
// raw, under RecordKey.
func (k Kind) Object(namespace, name string, raw []byte) *v1.ConfigMap {
	return &v1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace,
			Name:      name,
			Labels:    map[string]string{k.Label: "true", "app.kubernetes.io/managed-by": schedulerName},
		},
		Data: map[string]string{RecordKey: string(raw)},
	}
}

// Store writes, lists and rejects the scheduler's records. Every write
// passes the gate first. Safe for concurrent use.
type Store struct {
	cfg Config
}

func newStore(cfg Config) *Store { return &Store{cfg: cfg} }

// Namespace is the namespace the records live in.
func (s *Store) Namespace() string { return s.cfg.RecordNamespace }

// Create writes a record of kind k (object names what it is about, for the
// gate) and returns it as created.
func (s *Store) Create(ctx context.Context, k Kind, object string, cm *v1.ConfigMap) (*v1.ConfigMap, error) {
	if err := s.cfg.Gate.Check(k.CreateStep, object); err != nil {
		return nil, err
	}
	cms := s.cfg.Client.CoreV1().ConfigMaps(cm.Namespace)
	out, err := cms.Create(ctx, cm, metav1.CreateOptions{FieldManager: schedulerName})
	if k.Replace && apierrors.IsAlreadyExists(err) {
		if err = cms.Delete(ctx, cm.Name, metav1.DeleteOptions{}); err == nil || apierrors.IsNotFound(err) {
			out, err = cms.Create(ctx, cm, metav1.CreateOptions{FieldManager: schedulerName})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("create %s %s/%s: %w", k.What, cm.Namespace, cm.Name, err)
	}
	return out, nil
}

// Delete removes a record of kind k. The delete carries the record's UID;
// a record already gone (or replaced) is fine.
func (s *Store) Delete(ctx context.Context, k Kind, object string, cm *v1.ConfigMap) error {
	if err := s.cfg.Gate.Check(k.DeleteStep, object); err != nil {
		return err
	}
	err := s.cfg.Client.CoreV1().ConfigMaps(cm.Namespace).Delete(ctx, cm.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cm.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete %s %s/%s: %w", k.What, cm.Namespace, cm.Name, err)
	}
	return nil
}

// List lists the records of kind k live (label and name prefix), retrying
// with backoff until it succeeds or ctx is done: scheduling must not start
// before every record is known.
func (s *Store) List(ctx context.Context, k Kind) ([]*v1.ConfigMap, error) {
	sel := labels.Set{k.Label: "true"}.String()
	delay := 100 * time.Millisecond
	for {
		list, err := s.cfg.Client.CoreV1().ConfigMaps(s.cfg.RecordNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err == nil {
			out := make([]*v1.ConfigMap, 0, len(list.Items))
			for i := range list.Items {
				if cm := &list.Items[i]; strings.HasPrefix(cm.Name, k.Prefix) {
					out = append(out, cm)
				}
			}
			return out, nil
		}
		klog.FromContext(ctx).Error(err, "Listing records, retrying", "label", k.Label, "namespace", s.cfg.RecordNamespace, "delay", delay)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("list %s records: %w", k.Label, context.Cause(ctx))
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// Reject reports a record that cannot be trusted (before it is deleted
// without being acted on): an event on the PodGroup with uid when there is
// one, else on the record.
func (s *Store) Reject(ctx context.Context, k Kind, cm *v1.ConfigMap, uid types.UID, err error) {
	s.cfg.Metrics.recovery(RecoveryRejected)
	klog.FromContext(ctx).Error(err, "Rejecting an invalid record; nothing is done with it",
		"kind", k.What, "record", klog.KObj(cm), "content", Shorten(cm.Data[RecordKey], 2048))
	note := fmt.Sprintf("%s %s/%s rejected and removed, nothing was done with it: %v", k.What, cm.Namespace, cm.Name, err)
	if s.cfg.PodGroups != nil {
		if pgs, lerr := s.cfg.PodGroups.List(labels.Everything()); lerr == nil {
			for _, pg := range pgs {
				if pg.UID == uid {
					s.cfg.Report.Event(pg, v1.EventTypeWarning, vocab.EventCommitRecordRejected, "Recovering", note)
					return
				}
			}
		}
	}
	s.cfg.Report.Event(cm, v1.EventTypeWarning, vocab.EventCommitRecordRejected, "Recovering", note)
}

// Decode decodes the record of a ConfigMap into v: the key must be there,
// at most MaxRecordBytes, strict JSON (no unknown fields, no trailing
// data). what names the record in errors ("parse <what>").
func Decode(cm *v1.ConfigMap, what string, v any) error {
	raw, ok := cm.Data[RecordKey]
	if !ok {
		return fmt.Errorf("no %q key", RecordKey)
	}
	if len(raw) > MaxRecordBytes {
		return fmt.Errorf("record is %d bytes, over the limit of %d", len(raw), MaxRecordBytes)
	}
	return recordwire.DecodeStrict([]byte(raw), what, v)
}

// Problems collects what is wrong with a decoded record while it is
// validated; Err names the first eight.
type Problems = recordwire.Problems

// Shorten cuts s to n bytes followed by "..." for logs and errors.
func Shorten(s string, n int) string { return recordwire.Shorten(s, n) }
