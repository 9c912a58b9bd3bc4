package commit

import (
	"context"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1beta1"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/commit/recordwire"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/report"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// schedulerName is the reporting controller of events and the field manager
// of writes.
const schedulerName = topology.SchedulerName

// Conditions writes a PodGroup's InitiallyScheduled condition; the loop
// owns the condition's rules (unchanged conditions are not rewritten, True
// is terminal). Every write passes the gate.
type Conditions interface {
	SetInitiallyScheduled(ctx context.Context, pg *schedulingv1beta1.PodGroup, status metav1.ConditionStatus, reason, message string) error
}

// Config is what the commit room needs. Client, RecordNamespace and Gate
// are required; Conditions is required for PodGroup commits; the listers
// for recovery.
type Config struct {
	Client kubernetes.Interface
	// RecordNamespace holds the records (ConfigMaps only the scheduler's
	// identity may write).
	RecordNamespace string
	// Parallelism is the number of writes of one phase in flight at once.
	Parallelism int
	// Gate is checked before every write.
	Gate *gate.Gate
	// Report records events (nil: none).
	Report *report.Reporter
	// Metrics receives the commit and recovery metrics (nil: none).
	Metrics    *Metrics
	Conditions Conditions
	// The informers' listers: recovery reads them before it reads live.
	Pods      corelisters.PodLister
	PodGroups schedulinglisters.PodGroupLister
	Claims    resourcelisters.ResourceClaimLister
	Nodes     corelisters.NodeLister
}

// Committer is the commit room of one leadership term: it writes decisions
// (Begin, BeginTree, Txn), keeps the records this term knows of, and finishes or rolls
// back the commits a crash left half done (RecoverAll, RecoverRecord). Safe
// for concurrent use (pipelined commits).
type Committer struct {
	cfg     Config
	store   *Store
	records *recordSet
}

// New returns the commit room for cfg.
func New(cfg Config) *Committer {
	return &Committer{cfg: cfg, store: newStore(cfg), records: newRecordSet()}
}

// Store is the record store the commit records live in; nominations use it
// too.
func (c *Committer) Store() *Store { return c.store }

// Record returns the commit record of the root with uid (a flat gang's
// PodGroup, a tree's root CompositePodGroup), nil when this term knows of
// none: a commit of that gang or tree may be half done while there is one.
func (c *Committer) Record(uid types.UID) *v1.ConfigMap { return c.records.get(uid) }

// Begin plans the commit of decision d for gang g (pg nil for a gang of
// one); nothing is written before Run.
func (c *Committer) Begin(pg *schedulingv1beta1.PodGroup, g *placement.Gang, d *placement.Decision) *Txn {
	return c.begin(rootOf(pg), []Leaf{{PodGroup: pg, Gang: g, Decision: d}})
}

// BeginTree plans the commit of the placed leaves of a tree as one
// transaction, recorded under root (Record(root.UID)); nothing is written
// before Run. Root is the tree's root CompositePodGroup, or a PodGroup
// that is its own one leaf (Begin's commit). It refuses leaves that cannot
// commit as one (checkTree): not 1..MaxRecordGroups distinct PodGroups of
// the root's namespace, or a leaf whose decision places no pod. Check
// RecordFitsTree before placing the tree.
func (c *Committer) BeginTree(root Root, leaves []Leaf) (*Txn, error) {
	if err := checkTree(root, leaves); err != nil {
		return nil, err
	}
	return c.begin(root, slices.Clone(leaves)), nil
}

func (c *Committer) begin(root Root, leaves []Leaf) *Txn {
	return &Txn{c: c, root: root, leaves: leaves, pods: treePods(leaves), writes: planLeafWrites(leaves), written: map[types.UID]string{}}
}

// createRecord writes the commit record of a PodGroup or tree commit, in
// parts when it is larger than one object. A record that does not
// validate is never written (recovery would reject it, and the scheduler's
// own record must always be one it acts on): the commit fails before its
// first write.
func (c *Committer) createRecord(ctx context.Context, rec *commitRecord) (*v1.ConfigMap, error) {
	object := rec.Root.Key()
	if err := rec.Validate(); err != nil {
		return nil, fmt.Errorf("commit record of %s does not validate; nothing was written: %w", rec.Root, err)
	}
	raw, err := recordwire.Encode(rec)
	if err != nil {
		return nil, err
	}
	head, parts, err := CommitRecords.Objects(c.cfg.RecordNamespace, vocab.RecordName(rec.Root.UID), raw)
	if err != nil {
		return nil, fmt.Errorf("commit record of %d pods and %d claims: %w", len(rec.Pods), len(rec.Claims), err)
	}
	out, err := c.store.CreateRecord(ctx, CommitRecords, object, head, parts)
	if err != nil {
		return nil, err
	}
	c.records.put(out)
	return out, nil
}

// deleteRecord removes a commit record and its parts (the commit is
// complete or undone). The delete carries the record's UID; a record
// already gone is fine.
func (c *Committer) deleteRecord(ctx context.Context, cm *v1.ConfigMap, object string) error {
	if err := c.store.DeleteRecord(ctx, CommitRecords, object, cm); err != nil {
		return err
	}
	c.records.remove(cm)
	return nil
}

// adoptRecord reads a commit record that exists but was not in this term's
// set, so that the gang's next attempt recovers it first.
func (c *Committer) adoptRecord(ctx context.Context, uid types.UID) {
	cm, err := c.cfg.Client.CoreV1().ConfigMaps(c.cfg.RecordNamespace).Get(ctx, vocab.RecordName(uid), metav1.GetOptions{})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Reading an unknown commit record", "record", vocab.RecordName(uid))
		return
	}
	c.records.put(cm)
}

// writeClaim adds the deallocation finalizer when the claim gets an
// allocation (kube-controller-manager clears the allocation of a claim that
// carries it once the last consumer is gone), then writes allocation and
// reservations in one status update. Both writes carry the resourceVersion
// the decision saw. It returns the claim as written.
func (c *Committer) writeClaim(ctx context.Context, w claimWrite) (*resourceapi.ResourceClaim, error) {
	rc := w.claim
	name := rc.Namespace + "/" + rc.Name
	claims := c.cfg.Client.ResourceV1().ResourceClaims(rc.Namespace)
	if w.alloc != nil && !slices.Contains(rc.Finalizers, resourceapi.Finalizer) {
		if err := c.cfg.Gate.Check(gate.StepClaimFinalizer, name); err != nil {
			return nil, err
		}
		rc = rc.DeepCopy()
		rc.Finalizers = append(rc.Finalizers, resourceapi.Finalizer)
		var err error
		if rc, err = claims.Update(ctx, rc, metav1.UpdateOptions{FieldManager: schedulerName}); err != nil {
			return nil, fmt.Errorf("add finalizer to claim %s: %w", name, err)
		}
	}
	if err := c.cfg.Gate.Check(gate.StepClaimStatus, name); err != nil {
		return nil, err
	}
	rc = rc.DeepCopy()
	if w.alloc != nil {
		rc.Status.Allocation = w.alloc.DeepCopy()
		// Dropped by the apiserver unless DRADeviceBindingConditions is
		// on; where it is kept, double-allocation repair orders by it.
		now := metav1.Now()
		rc.Status.Allocation.AllocationTimestamp = &now
	}
	rc.Status.ReservedFor = append(rc.Status.ReservedFor, w.consumers...)
	out, err := claims.UpdateStatus(ctx, rc, metav1.UpdateOptions{FieldManager: schedulerName})
	if err != nil {
		return nil, fmt.Errorf("allocate claim %s: %w", name, err)
	}
	return out, nil
}

// bind binds a pod; the binding carries the pod's UID as a precondition.
func (c *Committer) bind(ctx context.Context, namespace, name string, uid types.UID, node string) error {
	if err := c.cfg.Gate.Check(gate.StepBind, namespace+"/"+name); err != nil {
		return err
	}
	b := &v1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: uid},
		Target:     v1.ObjectReference{Kind: "Node", Name: node},
	}
	if err := c.cfg.Client.CoreV1().Pods(namespace).Bind(ctx, b, metav1.CreateOptions{FieldManager: schedulerName}); err != nil {
		return fmt.Errorf("bind pod %s/%s to %s: %w", namespace, name, node, err)
	}
	return nil
}
