package inspect

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Need says what Load lists. Namespace limits the namespaced lists (pods,
// claims, PodGroups, events); "" lists every namespace.
type Need struct {
	Namespace string
	// Fabric: Nodes and ResourceSlices.
	Fabric bool
	// FabricOptional turns a forbidden Nodes or ResourceSlices list into a
	// warning (explain works for tenants who may not list them).
	FabricOptional bool
	Claims         bool
	Pods           bool
	PodGroups      bool
	// Composites lists CompositePodGroups, when served (a cluster without
	// the API, or a user who may not list them, gets a warning).
	Composites bool
	// EventsAbout lists the events regarding the PodGroup of this name.
	EventsAbout string
}

// pageSize bounds each list call; Load follows continue tokens.
const pageSize = 500

// step lists one resource into a Cluster.
type step struct {
	on       bool
	what     string
	optional bool
	list     func(ctx context.Context, c kubernetes.Interface, need Need, out *Cluster) error
}

func steps(need Need) []step {
	return []step{
		{need.Fabric, "nodes", need.FabricOptional, listNodes},
		{need.Fabric, "resourceslices", need.FabricOptional, listSlices},
		{need.Claims, "resourceclaims", false, listClaims},
		{need.Pods, "pods", false, listPods},
		{need.PodGroups, "podgroups", false, listPodGroups},
		{need.Composites, "compositepodgroups", true, listComposites},
		{need.EventsAbout != "", "events", true, listEvents},
	}
}

// Load lists what a report needs.
func Load(ctx context.Context, c kubernetes.Interface, need Need) (*Cluster, error) {
	out := &Cluster{}
	logger := klog.FromContext(ctx)
	for _, s := range steps(need) {
		if !s.on {
			continue
		}
		err := s.list(ctx, c, need, out)
		switch {
		case err == nil:
			logger.V(4).Info("Listed", "resource", s.what, "namespace", need.Namespace)
		case s.optional && apierrors.IsForbidden(err):
			out.Warnings = append(out.Warnings, fmt.Sprintf("cannot list %s (forbidden): left out", s.what))
		case s.optional && apierrors.IsNotFound(err):
			logger.V(4).Info("Not served", "resource", s.what) // e.g. CompositePodGroups without their gate
		default:
			return nil, fmt.Errorf("list %s: %w", s.what, err)
		}
	}
	return out, nil
}

func listNodes(ctx context.Context, c kubernetes.Interface, _ Need, out *Cluster) (err error) {
	out.Nodes, err = listAll(ctx, func(o metav1.ListOptions) ([]corev1.Node, string, error) {
		l, err := c.CoreV1().Nodes().List(ctx, o)
		return items(l, err, func(l *corev1.NodeList) ([]corev1.Node, string) { return l.Items, l.Continue })
	})
	return err
}

func listSlices(ctx context.Context, c kubernetes.Interface, _ Need, out *Cluster) (err error) {
	out.Slices, err = listAll(ctx, func(o metav1.ListOptions) ([]resourceapi.ResourceSlice, string, error) {
		l, err := c.ResourceV1().ResourceSlices().List(ctx, o)
		return items(l, err, func(l *resourceapi.ResourceSliceList) ([]resourceapi.ResourceSlice, string) {
			return l.Items, l.Continue
		})
	})
	return err
}

func listClaims(ctx context.Context, c kubernetes.Interface, need Need, out *Cluster) (err error) {
	out.Claims, err = listAll(ctx, func(o metav1.ListOptions) ([]resourceapi.ResourceClaim, string, error) {
		l, err := c.ResourceV1().ResourceClaims(need.Namespace).List(ctx, o)
		return items(l, err, func(l *resourceapi.ResourceClaimList) ([]resourceapi.ResourceClaim, string) {
			return l.Items, l.Continue
		})
	})
	return err
}

func listPods(ctx context.Context, c kubernetes.Interface, need Need, out *Cluster) (err error) {
	out.Pods, err = listAll(ctx, func(o metav1.ListOptions) ([]corev1.Pod, string, error) {
		l, err := c.CoreV1().Pods(need.Namespace).List(ctx, o)
		return items(l, err, func(l *corev1.PodList) ([]corev1.Pod, string) { return l.Items, l.Continue })
	})
	return err
}

func listPodGroups(ctx context.Context, c kubernetes.Interface, need Need, out *Cluster) (err error) {
	out.PodGroups, err = listAll(ctx, func(o metav1.ListOptions) ([]schedulingv1beta1.PodGroup, string, error) {
		l, err := c.SchedulingV1beta1().PodGroups(need.Namespace).List(ctx, o)
		return items(l, err, func(l *schedulingv1beta1.PodGroupList) ([]schedulingv1beta1.PodGroup, string) {
			return l.Items, l.Continue
		})
	})
	return err
}

func listComposites(ctx context.Context, c kubernetes.Interface, need Need, out *Cluster) (err error) {
	out.Composites, err = listAll(ctx, func(o metav1.ListOptions) ([]schedulingv1alpha3.CompositePodGroup, string, error) {
		l, err := c.SchedulingV1alpha3().CompositePodGroups(need.Namespace).List(ctx, o)
		return items(l, err, func(l *schedulingv1alpha3.CompositePodGroupList) ([]schedulingv1alpha3.CompositePodGroup, string) {
			return l.Items, l.Continue
		})
	})
	return err
}

// listEvents lists the events whose regarding object has the PodGroup's
// name (the kind is checked by BuildExplain).
func listEvents(ctx context.Context, c kubernetes.Interface, need Need, out *Cluster) (err error) {
	sel := fields.Set{"regarding.name": need.EventsAbout}.AsSelector().String()
	out.Events, err = listAll(ctx, func(o metav1.ListOptions) ([]eventsv1.Event, string, error) {
		o.FieldSelector = sel
		l, err := c.EventsV1().Events(need.Namespace).List(ctx, o)
		return items(l, err, func(l *eventsv1.EventList) ([]eventsv1.Event, string) { return l.Items, l.Continue })
	})
	return err
}

// items unpacks a typed list call's result.
func items[L any, T any](l L, err error, get func(L) ([]T, string)) ([]T, string, error) {
	if err != nil {
		return nil, "", err
	}
	its, cont := get(l)
	return its, cont, nil
}

// listAll calls list page by page until the continue token is empty.
func listAll[T any](ctx context.Context, list func(metav1.ListOptions) ([]T, string, error)) ([]T, error) {
	var out []T
	opts := metav1.ListOptions{Limit: pageSize}
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		page, cont, err := list(opts)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if cont == "" {
			return out, nil
		}
		opts.Continue = cont
	}
}
