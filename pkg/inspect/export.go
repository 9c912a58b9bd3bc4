package inspect

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// annotationLastApplied is kubectl apply's copy of an object: left out of
// exports.
const annotationLastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// ForExport returns what `kubectl gpufabric snapshot` writes: copies of the
// Nodes, the ResourceSlices of driver gpufabric.dev, the bound pods that
// have not ended, and the allocated ResourceClaims (the existing load),
// without server-managed metadata (managedFields, resourceVersion,
// kubectl's last-applied annotation), and of the pods' containers only
// names, resources and restart policies (no images, commands or
// environment). UIDs stay: claims name their pods by UID.
func ForExport(c *Cluster) *Cluster {
	out := &Cluster{}
	for i := range c.Nodes {
		n := c.Nodes[i].DeepCopy()
		clean(&n.ObjectMeta)
		out.Nodes = append(out.Nodes, *n)
	}
	for i := range c.Slices {
		if c.Slices[i].Spec.Driver != topology.DriverName {
			continue
		}
		s := c.Slices[i].DeepCopy()
		clean(&s.ObjectMeta)
		out.Slices = append(out.Slices, *s)
	}
	for i := range c.Pods {
		p := &c.Pods[i]
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		p = p.DeepCopy()
		clean(&p.ObjectMeta)
		p.Spec.InitContainers = resourcesOnly(p.Spec.InitContainers)
		p.Spec.Containers = resourcesOnly(p.Spec.Containers)
		p.Spec.EphemeralContainers = nil
		out.Pods = append(out.Pods, *p)
	}
	for i := range c.Claims {
		if c.Claims[i].Status.Allocation == nil {
			continue
		}
		rc := c.Claims[i].DeepCopy()
		clean(&rc.ObjectMeta)
		out.Claims = append(out.Claims, *rc)
	}
	return out
}

func clean(m *metav1.ObjectMeta) {
	m.ManagedFields = nil
	m.ResourceVersion = ""
	delete(m.Annotations, annotationLastApplied)
	if len(m.Annotations) == 0 {
		m.Annotations = nil
	}
}

// resourcesOnly keeps what placement reads of containers.
func resourcesOnly(cs []corev1.Container) []corev1.Container {
	var out []corev1.Container
	for _, c := range cs {
		out = append(out, corev1.Container{Name: c.Name, Resources: c.Resources, RestartPolicy: c.RestartPolicy})
	}
	return out
}
