package topology

// PodGroup annotations read by the scheduler until the API has fields for them.
const (
	// AnnotationPreferredTopologyKey names the topology key (a level of the
	// fabric tree) the gang should be placed in when it fits there. Without
	// a fit the scheduler falls back to the levels above it.
	AnnotationPreferredTopologyKey = DriverName + "/preferred-topology-key"
	// AnnotationRailAlignment is RailAlignmentPreferred (the default) or
	// RailAlignmentRequired: whether every member's GPUs must be on the same
	// set of IB rails.
	AnnotationRailAlignment = DriverName + "/rail-alignment"

	RailAlignmentPreferred = "preferred"
	RailAlignmentRequired  = "required"
)
