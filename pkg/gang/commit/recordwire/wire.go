package recordwire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// The JSON of a commit record. Version 2 (written since gangs of up to
// MaxPods members commit) is a flat gang's, compact: the nodes once,
// in a table, each pod naming its node by index, and each claim its pods
// by index:
//
//	{"v":2,"podGroup":{"namespace","name","uid"},"domain","key",
//	 "nodes":["n-0",…],"pods":[{"n","u","o":<node index>}],
//	 "claims":[{"n","u","p":[<pod index>…],"a":<fingerprint>}]}
//
// Version 3 is a tree's (its root a CompositePodGroup): the root, the leaf
// PodGroups each with where it goes, each pod naming its group by index
// ("g", 0 when left out), each claim the groups it is reserved for:
//
//	{"v":3,"root":{"kind","namespace","name","uid"},
//	 "groups":[{"namespace","name","uid","domain","key"}],
//	 "nodes":[…],"pods":[{"n","u","o","g":<group index>}],
//	 "claims":[{"n","u","p":[…],"a","g":[<group index>…]}]}
//
// A flat gang's record stays version 2, so that a scheduler of the
// previous release reads it (a rolling upgrade, a rollback). Version 1
// (one pod per claim, node names inline) is still read, so that a commit
// an older scheduler left half done is recovered.
const (
	Version1    = 1
	Version2    = 2
	VersionTree = 3
)

// wireRecord is the JSON of every version, the lists raw: PodGroup,
// Domain and TopologyKey only in versions 1 and 2, Root and Groups only
// in version 3, Nodes from version 2 (fromV1, fromV2, fromV3 check).
type wireRecord struct {
	Version     int             `json:"v"`
	PodGroup    *wireGroup      `json:"podGroup"`
	Root        *wireRoot       `json:"root"`
	Groups      json.RawMessage `json:"groups"`
	Domain      string          `json:"domain"`
	TopologyKey string          `json:"key,omitempty"`
	Nodes       []string        `json:"nodes,omitempty"`
	Pods        json.RawMessage `json:"pods"`
	Claims      json.RawMessage `json:"claims"`
}

type wireGroup struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
}

type wireRoot struct {
	Kind string `json:"kind"`
	wireGroup
}

// wireLeaf is a version 3 group.
type wireLeaf struct {
	wireGroup
	Domain      string `json:"domain,omitempty"`
	TopologyKey string `json:"key,omitempty"`
}

type wirePod struct {
	Name string    `json:"n"`
	UID  types.UID `json:"u"`
	Node int       `json:"o"`
}

type wireClaim struct {
	Name       string    `json:"n"`
	UID        types.UID `json:"u"`
	Pods       []int     `json:"p,omitempty"`
	Allocation string    `json:"a,omitempty"`
}

// wirePodV3 and wireClaimV3 add the group indices of version 3.
type wirePodV3 struct {
	wirePod
	Group int `json:"g,omitempty"`
}

type wireClaimV3 struct {
	wireClaim
	Groups []int `json:"g,omitempty"`
}

type wirePodV1 struct {
	Name string    `json:"n"`
	UID  types.UID `json:"u"`
	Node string    `json:"node"`
}

type wireClaimV1 struct {
	Name       string    `json:"n"`
	UID        types.UID `json:"u"`
	Pod        string    `json:"pod,omitempty"`
	Allocation string    `json:"alloc,omitempty"`
}

// Encode is rec's JSON: version 3 for a tree, else version 2. Every
// pod a claim names must be in rec.Pods (validate).
func Encode(rec *Record) ([]byte, error) {
	nodes, pods, claims, err := rec.compact()
	if err != nil {
		return nil, err
	}
	var w any
	if rec.Tree() {
		w3 := struct {
			Version int           `json:"v"`
			Root    wireRoot      `json:"root"`
			Groups  []wireLeaf    `json:"groups"`
			Nodes   []string      `json:"nodes"`
			Pods    []wirePodV3   `json:"pods"`
			Claims  []wireClaimV3 `json:"claims"`
		}{Version: VersionTree, Root: wireRoot{Kind: rec.Root.Kind, wireGroup: wireGroup{rec.Root.Namespace, rec.Root.Name, rec.Root.UID}},
			Groups: make([]wireLeaf, len(rec.Groups)), Nodes: nodes, Pods: make([]wirePodV3, len(pods)), Claims: make([]wireClaimV3, len(claims))}
		for i, g := range rec.Groups {
			w3.Groups[i] = wireLeaf{wireGroup: wireGroup{g.Namespace, g.Name, g.UID}, Domain: g.Domain, TopologyKey: g.TopologyKey}
		}
		for i := range pods {
			w3.Pods[i] = wirePodV3{wirePod: pods[i], Group: rec.Pods[i].Group}
		}
		for i := range claims {
			w3.Claims[i] = wireClaimV3{wireClaim: claims[i], Groups: rec.Claims[i].Groups}
		}
		w = w3
	} else {
		g := rec.Groups[0]
		w = struct {
			Version     int         `json:"v"`
			PodGroup    wireGroup   `json:"podGroup"`
			Domain      string      `json:"domain"`
			TopologyKey string      `json:"key,omitempty"`
			Nodes       []string    `json:"nodes,omitempty"`
			Pods        []wirePod   `json:"pods"`
			Claims      []wireClaim `json:"claims"`
		}{Version2, wireGroup{g.Namespace, g.Name, g.UID}, g.Domain, g.TopologyKey, nodes, pods, claims}
	}
	raw, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("encode commit record: %w", err)
	}
	return raw, nil
}

// compact is rec's node table, pods and claims by index (versions 2, 3).
func (rec *Record) compact() ([]string, []wirePod, []wireClaim, error) {
	nodes := []string{}
	at := map[string]int{}
	pods := make([]wirePod, len(rec.Pods))
	index := make(map[string]int, len(rec.Pods))
	for i, p := range rec.Pods {
		n, ok := at[p.Node]
		if !ok {
			n = len(nodes)
			at[p.Node] = n
			nodes = append(nodes, p.Node)
		}
		pods[i] = wirePod{Name: p.Name, UID: p.UID, Node: n}
		index[p.Name] = i
	}
	claims := make([]wireClaim, len(rec.Claims))
	for i, c := range rec.Claims {
		wc := wireClaim{Name: c.Name, UID: c.UID, Allocation: c.Allocation}
		for _, name := range c.Pods {
			pi, ok := index[name]
			if !ok {
				return nil, nil, nil, fmt.Errorf("encode commit record: claim %s names pod %s, which it does not list", c.Name, name)
			}
			wc.Pods = append(wc.Pods, pi)
		}
		claims[i] = wc
	}
	return nodes, pods, claims, nil
}

// Decode reads and validates a record's whole JSON (all its parts,
// joined), stored under the object name. Rules: the JSON is strict (no
// unknown fields, no field of another version, no trailing data), every
// index is in range, the record validates, and the name is the one of the
// root it names.
func Decode(name string, raw []byte) (*Record, error) {
	var w wireRecord
	if err := DecodeStrict(raw, "record", &w); err != nil {
		return nil, err
	}
	rec := &Record{Version: w.Version}
	var err error
	switch w.Version {
	case Version1:
		err = rec.fromV1(w)
	case Version2:
		err = rec.fromV2(w)
	case VersionTree:
		err = rec.fromV3(w)
	default:
		err = fmt.Errorf("version %d, want %d, %d or %d", w.Version, Version1, Version2, VersionTree)
	}
	if err != nil {
		return nil, err
	}
	if err := rec.Validate(); err != nil {
		return nil, err
	}
	if want := vocab.RecordName(rec.Root.UID); name != want {
		return nil, fmt.Errorf("record %s names %s UID %q (expected object name %s)", name, strings.ToLower(rec.Root.Kind), Shorten(string(rec.Root.UID), 64), Shorten(want, 128))
	}
	return rec, nil
}

// flat sets the root and the one group of a version 1 or 2 record.
func (rec *Record) flat(w wireRecord) error {
	if w.Root != nil || w.Groups != nil {
		return fmt.Errorf("parse record: version %d has no root or groups", w.Version)
	}
	var g wireGroup
	if w.PodGroup != nil {
		g = *w.PodGroup
	}
	rec.Root = Root{Kind: KindPodGroup, Namespace: g.Namespace, Name: g.Name, UID: g.UID}
	rec.Groups = []Group{{Namespace: g.Namespace, Name: g.Name, UID: g.UID, Domain: w.Domain, TopologyKey: w.TopologyKey}}
	return nil
}

func (rec *Record) fromV1(w wireRecord) error {
	var pods []wirePodV1
	var claims []wireClaimV1
	if w.Nodes != nil {
		return fmt.Errorf("parse record: version 1 has no nodes")
	}
	if err := rec.flat(w); err != nil {
		return err
	}
	if err := decodeLists(w, &pods, &claims); err != nil {
		return err
	}
	for _, p := range pods {
		rec.Pods = append(rec.Pods, Pod{Name: p.Name, UID: p.UID, Node: p.Node})
	}
	for _, c := range claims {
		rc := Claim{Name: c.Name, UID: c.UID, Allocation: c.Allocation}
		if c.Pod != "" {
			rc.Pods = []string{c.Pod}
		}
		rec.Claims = append(rec.Claims, rc)
	}
	return nil
}

func (rec *Record) fromV2(w wireRecord) error {
	var pods []wirePod
	var claims []wireClaim
	if err := rec.flat(w); err != nil {
		return err
	}
	if err := decodeLists(w, &pods, &claims); err != nil {
		return err
	}
	return rec.resolve(w.Nodes, pods, claims)
}

func (rec *Record) fromV3(w wireRecord) error {
	if w.PodGroup != nil || w.Domain != "" || w.TopologyKey != "" {
		return fmt.Errorf("parse record: version 3 has no podGroup, domain or key but per group")
	}
	if w.Root == nil {
		return fmt.Errorf("parse record: version 3 has no root")
	}
	var groups []wireLeaf
	if err := DecodeStrict(w.Groups, "record groups", &groups); err != nil {
		return err
	}
	if len(groups) == 0 || len(groups) > MaxGroups {
		return fmt.Errorf("%d groups, want 1..%d", len(groups), MaxGroups)
	}
	rec.Root = Root{Kind: w.Root.Kind, Namespace: w.Root.Namespace, Name: w.Root.Name, UID: w.Root.UID}
	rec.Groups = make([]Group, len(groups))
	for i, g := range groups {
		rec.Groups[i] = Group{Namespace: g.Namespace, Name: g.Name, UID: g.UID, Domain: g.Domain, TopologyKey: g.TopologyKey}
	}
	var pods3 []wirePodV3
	var claims3 []wireClaimV3
	if err := decodeLists(w, &pods3, &claims3); err != nil {
		return err
	}
	pods := make([]wirePod, len(pods3))
	for i := range pods3 {
		pods[i] = pods3[i].wirePod
	}
	claims := make([]wireClaim, len(claims3))
	for i := range claims3 {
		claims[i] = claims3[i].wireClaim
	}
	if err := rec.resolve(w.Nodes, pods, claims); err != nil {
		return err
	}
	var p Problems
	for i := range pods3 {
		rec.Pods[i].Group = pods3[i].Group // in range: validate
	}
	for i, wc := range claims3 {
		if len(wc.Groups) > len(groups) {
			p.Addf("claims[%d].g: %d groups of %d", i, len(wc.Groups), len(groups))
			continue
		}
		rec.Claims[i].Groups = append(rec.Claims[i].Groups, wc.Groups...) // in range and each once: validate
	}
	return p.Err()
}

// resolve sets the pods and claims of a compact record (versions 2, 3):
// each pod's node from the table, each claim's pods by index.
func (rec *Record) resolve(nodes []string, pods []wirePod, claims []wireClaim) error {
	var p Problems
	rec.Pods = make([]Pod, len(pods))
	for i, wp := range pods {
		rec.Pods[i] = Pod{Name: wp.Name, UID: wp.UID}
		if wp.Node < 0 || wp.Node >= len(nodes) {
			p.Addf("pods[%d].o: node %d of %d", i, wp.Node, len(nodes))
			continue
		}
		rec.Pods[i].Node = nodes[wp.Node]
	}
	for i, wc := range claims {
		rec.Claims = append(rec.Claims, Claim{Name: wc.Name, UID: wc.UID, Allocation: wc.Allocation})
		if len(wc.Pods) > len(pods) {
			p.Addf("claims[%d].p: %d pods of %d", i, len(wc.Pods), len(pods))
			continue
		}
		for _, pi := range wc.Pods {
			if pi < 0 || pi >= len(pods) {
				p.Addf("claims[%d].p: pod %d of %d", i, pi, len(pods))
				continue
			}
			rec.Claims[i].Pods = append(rec.Claims[i].Pods, pods[pi].Name)
		}
	}
	return p.Err()
}

// decodeLists decodes a record's pods and claims (strict, bounded before
// their entries are kept).
func decodeLists[P, C any](w wireRecord, pods *[]P, claims *[]C) error {
	if err := DecodeStrict(w.Pods, "record pods", pods); err != nil {
		return err
	}
	if len(*pods) == 0 || len(*pods) > MaxPods {
		return fmt.Errorf("%d pods, want 1..%d", len(*pods), MaxPods)
	}
	if len(w.Claims) > 0 {
		if err := DecodeStrict(w.Claims, "record claims", claims); err != nil {
			return err
		}
	}
	if len(*claims) > MaxClaims {
		return fmt.Errorf("%d claims, over the limit of %d", len(*claims), MaxClaims)
	}
	return nil
}

// DecodeStrict decodes raw into v: no unknown fields, no trailing data.
// what names the document in errors ("parse <what>").
func DecodeStrict(raw []byte, what string, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("parse %s: %w", what, err)
	}
	if dec.More() {
		return fmt.Errorf("parse %s: trailing data", what)
	}
	return nil
}
