package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

// applyDir creates every object of every *.yaml file in dir, files in name
// order, objects in file order. A namespace the objects need is created by
// the files themselves.
func (d *demo) applyDir(ctx context.Context, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return fmt.Errorf("list manifests: %w", err)
	}
	sort.Strings(files)
	dyn, err := dynamic.NewForConfig(d.cp.AdminConfig())
	if err != nil {
		return fmt.Errorf("build dynamic client: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(d.client.Discovery()))
	for _, f := range files {
		if filepath.Base(f) == "fabric.yaml" {
			continue // the fabric file describes hardware, not API objects
		}
		if err := applyObjects(ctx, dyn, mapper, f); err != nil {
			return err
		}
	}
	return nil
}

// applyFile creates the objects of one manifest file.
func (d *demo) applyFile(ctx context.Context, path string) error {
	dyn, err := dynamic.NewForConfig(d.cp.AdminConfig())
	if err != nil {
		return fmt.Errorf("build dynamic client: %w", err)
	}
	return applyObjects(ctx, dyn, restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(d.client.Discovery())), path)
}

func applyObjects(ctx context.Context, dyn dynamic.Interface, mapper meta.RESTMapper, path string) error {
	objs, err := readObjects(path)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		if err := create(ctx, dyn, mapper, obj); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return nil
}

func readObjects(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open manifest: %w", err)
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("decode %s: %w", path, err)
		}
		if len(obj.Object) > 0 {
			out = append(out, obj)
		}
	}
}

func create(ctx context.Context, dyn dynamic.Interface, mapper meta.RESTMapper, obj *unstructured.Unstructured) error {
	gvk := obj.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("map %s: %w", gvk, err)
	}
	var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ri = dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
	}
	if _, err := ri.Create(ctx, obj, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
		return fmt.Errorf("create %s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	return nil
}
