package scheduler

import "k8s.io/client-go/tools/cache"

// unsynced names the informers of the term that have not synced yet, as
// "<resource>.<version>[.<group>]" (e.g.
// "podgroups.v1beta1.scheduling.k8s.io"), for Config.InformersStarted.
func (s *informerSet) unsynced() []string {
	var out []string
	for _, i := range []struct {
		name string
		inf  cache.SharedIndexInformer
	}{
		{"pods.v1", s.pods},
		{"podgroups.v1beta1.scheduling.k8s.io", s.podGroups},
		{"resourceclaims.v1.resource.k8s.io", s.claims},
		{"resourceslices.v1.resource.k8s.io", s.slices},
		{"deviceclasses.v1.resource.k8s.io", s.classes},
		{"resourceclaimtemplates.v1.resource.k8s.io", s.templates},
		{"nodes.v1", s.nodes},
		{"persistentvolumeclaims.v1", s.pvcs},
		{"persistentvolumes.v1", s.volumes},
		{"storageclasses.v1.storage.k8s.io", s.storage},
		{"poddisruptionbudgets.v1.policy", s.pdbs},
		{"priorityclasses.v1.scheduling.k8s.io", s.priorities},
		{"compositepodgroups.v1alpha3.scheduling.k8s.io", s.composites},
	} {
		if i.inf != nil && !i.inf.HasSynced() {
			out = append(out, i.name)
		}
	}
	return out
}
