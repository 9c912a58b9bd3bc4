package framework

import (
	"context"
	"fmt"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// The RBAC rule files the chart ships for the scheduler: cluster-wide, and
// in its own namespace (Lease, commit records).
const (
	SchedulerRulesFile          = "deployments/helm/gpufabric/files/rbac/scheduler.yaml"
	SchedulerNamespaceRulesFile = "deployments/helm/gpufabric/files/rbac/scheduler-namespace.yaml"
	// FreeRoomReaderRulesFile: the rules of the free-room view's readers
	// (scheduler.freeRoom.readerGroups) in the scheduler's namespace.
	FreeRoomReaderRulesFile = "deployments/helm/gpufabric/files/rbac/free-room-reader.yaml"
)

// GrantNamespaceRules creates a Role named user with rules in namespace and
// binds it to the user of that name.
func GrantNamespaceRules(ctx context.Context, admin kubernetes.Interface, user, namespace string, rules []rbacv1.PolicyRule) error {
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: namespace}, Rules: rules}
	if _, err := admin.RbacV1().Roles(namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create role %s/%s: %w", namespace, user, err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := admin.RbacV1().RoleBindings(namespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create role binding %s/%s: %w", namespace, user, err)
	}
	return WaitGranted(ctx, admin, user, namespace, rules)
}

// WaitGranted waits (at most 30 s) until the apiserver's authorizer allows
// user something of every rule, in namespace ("": cluster-wide): RBAC
// reads roles and bindings from its own informers, so a request right
// after the binding was created can still be forbidden.
func WaitGranted(ctx context.Context, admin kubernetes.Interface, user, namespace string, rules []rbacv1.PolicyRule) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, r := range rules {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user}}
			verb := first(r.Verbs, "get")
			if len(r.NonResourceURLs) > 0 {
				path := r.NonResourceURLs[0]
				if p, wild := strings.CutSuffix(path, "*"); wild {
					path = p + "x" // any path under the prefix
				}
				sar.Spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: path, Verb: verb}
			} else {
				resource, sub, _ := strings.Cut(first(r.Resources, "pods"), "/")
				sar.Spec.ResourceAttributes = &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: verb,
					Group: first(r.APIGroups, ""), Resource: resource, Subresource: sub, Name: first(r.ResourceNames, "")}
			}
			out, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
			if err != nil {
				return false, err
			}
			if !out.Status.Allowed {
				last = fmt.Sprintf("%+v %+v", sar.Spec.ResourceAttributes, sar.Spec.NonResourceAttributes)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("rules of %s not in force (last refused: %s): %w", user, last, err)
	}
	return nil
}

// first is v's first value, or def when v is empty or its first is "*".
func first(v []string, def string) string {
	if len(v) == 0 || v[0] == "*" {
		return def
	}
	return v[0]
}

// GrantSchedulerRules gives user exactly the scheduler's shipped rules: the
// cluster-wide ones, and the namespaced ones in namespace (its Lease and
// commit records), which it creates if needed.
func GrantSchedulerRules(ctx context.Context, admin kubernetes.Interface, user, namespace string) error {
	rules, err := LoadRules(SchedulerRulesFile)
	if err != nil {
		return err
	}
	nsRules, err := LoadRules(SchedulerNamespaceRulesFile)
	if err != nil {
		return err
	}
	if err := EnsureNamespace(ctx, admin, namespace); err != nil {
		return err
	}
	if err := GrantRules(ctx, admin, user, rules); err != nil {
		return err
	}
	return GrantNamespaceRules(ctx, admin, user, namespace, nsRules)
}

// EnsureNamespace creates a namespace if it does not exist. Idempotent.
func EnsureNamespace(ctx context.Context, admin kubernetes.Interface, namespace string) error {
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	return nil
}
