package main

import (
	"context"
	"path/filepath"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/devices"
)

// railStore keeps the node's rail map (devices.RailMap) in the state
// directory: every discovery numbers rails with it and it is written back
// when discovery learned something (a new HCA; the first start). Delete the
// file to number rails afresh after the node's HCAs changed for good.
type railStore struct {
	path    string
	current *devices.RailMap
}

func newRailStore(ctx context.Context, stateDir string) *railStore {
	s := &railStore{path: filepath.Join(stateDir, devices.RailMapFileName)}
	m, err := devices.LoadRailMap(s.path)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Ignoring the rail map; rails are numbered by position and the map is written again")
	}
	s.current = m
	return s
}

func (s *railStore) option() devices.Option { return devices.WithRailMap(s.current) }

// remember keeps m and writes it when it changed. A failed write is logged:
// the map in memory still holds the rails for this process.
func (s *railStore) remember(ctx context.Context, m *devices.RailMap) {
	if m == nil || equality.Semantic.DeepEqual(m, s.current) {
		return
	}
	s.current = m
	if err := devices.SaveRailMap(s.path, m); err != nil {
		klog.FromContext(ctx).Error(err, "Writing the rail map failed")
	}
}
