package commit

import (
	"bytes"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// The JSON of a commit record. Version 2 (written since gangs of up to
// MaxRecordPods members commit) is compact: the nodes once, in a table,
// each pod naming its node by index, and each claim its pods by index:
//
//	{"v":2,"podGroup":{"namespace","name","uid"},"domain","key",
//	 "nodes":["n-0",…],"pods":[{"n","u","o":<node index>}],
//	 "claims":[{"n","u","p":[<pod index>…],"a":<fingerprint>}]}
//
// Version 1 (one pod per claim, node names repeated) is still read, so
// that a commit an older scheduler left half done is recovered.
const (
	recordVersion1 = 1
	recordVersion  = 2
)

// wireRecord is the JSON of both versions; Nodes only in version 2, and
// Pods and Claims decoded by version.
type wireRecord struct {
	Version     int             `json:"v"`
	PodGroup    recordGroup     `json:"podGroup"`
	Domain      string          `json:"domain"`
	TopologyKey string          `json:"key,omitempty"`
	Nodes       []string        `json:"nodes,omitempty"`
	Pods        json.RawMessage `json:"pods"`
	Claims      json.RawMessage `json:"claims"`
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

// encodeRecord is rec's JSON, version 2. Every pod a claim names must be
// in rec.Pods (validate).
func encodeRecord(rec *commitRecord) ([]byte, error) {
	w := struct {
		wireRecord
		Pods   []wirePod   `json:"pods"`
		Claims []wireClaim `json:"claims"`
	}{wireRecord: wireRecord{Version: recordVersion, PodGroup: rec.PodGroup, Domain: rec.Domain, TopologyKey: rec.TopologyKey, Nodes: []string{}},
		Pods: make([]wirePod, len(rec.Pods)), Claims: make([]wireClaim, len(rec.Claims))}
	nodes := map[string]int{}
	pods := make(map[string]int, len(rec.Pods))
	for i, p := range rec.Pods {
		n, ok := nodes[p.Node]
		if !ok {
			n = len(w.Nodes)
			nodes[p.Node] = n
			w.Nodes = append(w.Nodes, p.Node)
		}
		w.Pods[i] = wirePod{Name: p.Name, UID: p.UID, Node: n}
		pods[p.Name] = i
	}
	for i, c := range rec.Claims {
		wc := wireClaim{Name: c.Name, UID: c.UID, Allocation: c.Allocation}
		for _, name := range c.Pods {
			pi, ok := pods[name]
			if !ok {
				return nil, fmt.Errorf("encode commit record: claim %s names pod %s, which it does not list", c.Name, name)
			}
			wc.Pods = append(wc.Pods, pi)
		}
		w.Claims[i] = wc
	}
	raw, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("encode commit record: %w", err)
	}
	return raw, nil
}

// decodeRecord reads and validates a record's whole JSON (all its parts,
// joined), stored under the object name. Rules: the JSON is strict (no
// unknown fields, no trailing data), every index is in range, the record
// validates, and the name is the one of the PodGroup it names.
func decodeRecord(name string, raw []byte) (*commitRecord, error) {
	var w wireRecord
	if err := decodeStrict(raw, "record", &w); err != nil {
		return nil, err
	}
	rec := &commitRecord{Version: w.Version, PodGroup: w.PodGroup, Domain: w.Domain, TopologyKey: w.TopologyKey}
	var err error
	switch w.Version {
	case recordVersion1:
		err = rec.fromV1(w)
	case recordVersion:
		err = rec.fromV2(w)
	default:
		err = fmt.Errorf("version %d, want %d or %d", w.Version, recordVersion1, recordVersion)
	}
	if err != nil {
		return nil, err
	}
	if err := rec.validate(); err != nil {
		return nil, err
	}
	if want := vocab.RecordName(rec.PodGroup.UID); name != want {
		return nil, fmt.Errorf("record %s names podgroup UID %q (expected object name %s)", name, Shorten(string(rec.PodGroup.UID), 64), Shorten(want, 128))
	}
	return rec, nil
}

func (rec *commitRecord) fromV1(w wireRecord) error {
	var pods []wirePodV1
	var claims []wireClaimV1
	if w.Nodes != nil {
		return fmt.Errorf("parse record: version 1 has no nodes")
	}
	if err := decodeLists(w, &pods, &claims); err != nil {
		return err
	}
	for _, p := range pods {
		rec.Pods = append(rec.Pods, recordPod(p))
	}
	for _, c := range claims {
		rc := recordClaim{Name: c.Name, UID: c.UID, Allocation: c.Allocation}
		if c.Pod != "" {
			rc.Pods = []string{c.Pod}
		}
		rec.Claims = append(rec.Claims, rc)
	}
	return nil
}

func (rec *commitRecord) fromV2(w wireRecord) error {
	var pods []wirePod
	var claims []wireClaim
	if err := decodeLists(w, &pods, &claims); err != nil {
		return err
	}
	var p Problems
	rec.Pods = make([]recordPod, len(pods))
	for i, wp := range pods {
		rec.Pods[i] = recordPod{Name: wp.Name, UID: wp.UID}
		if wp.Node < 0 || wp.Node >= len(w.Nodes) {
			p.Addf("pods[%d].o: node %d of %d", i, wp.Node, len(w.Nodes))
			continue
		}
		rec.Pods[i].Node = w.Nodes[wp.Node]
	}
	for i, wc := range claims {
		rec.Claims = append(rec.Claims, recordClaim{Name: wc.Name, UID: wc.UID, Allocation: wc.Allocation})
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
	if err := decodeStrict(w.Pods, "record pods", pods); err != nil {
		return err
	}
	if len(*pods) == 0 || len(*pods) > MaxRecordPods {
		return fmt.Errorf("%d pods, want 1..%d", len(*pods), MaxRecordPods)
	}
	if len(w.Claims) > 0 {
		if err := decodeStrict(w.Claims, "record claims", claims); err != nil {
			return err
		}
	}
	if len(*claims) > MaxRecordClaims {
		return fmt.Errorf("%d claims, over the limit of %d", len(*claims), MaxRecordClaims)
	}
	return nil
}

// decodeStrict decodes raw into v: no unknown fields, no trailing data.
// what names the document in errors ("parse <what>").
func decodeStrict(raw []byte, what string, v any) error {
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

// MaxRecordTotalBytes bounds a commit record's JSON over all its parts.
const MaxRecordTotalBytes = MaxRecordChunks * MaxRecordBytes

// RecordFits says why no commit of gang g (a PodGroup's) could be
// recorded, nil when every one can: more than MaxRecordPods members, more
// than MaxRecordClaims claims, or names so long that the record could
// take more than MaxRecordTotalBytes. The error wraps
// placement.ErrUnsupported: the loop refuses the gang with it before
// placing it, instead of placing it and failing its commit at every
// backoff.
func RecordFits(g *placement.Gang) error {
	claims := len(g.SharedClaims)
	for _, m := range g.Members {
		claims += len(m.Claims)
	}
	var err error
	switch {
	case len(g.Members) > MaxRecordPods:
		err = fmt.Errorf("%d members, more than the %d a commit record holds", len(g.Members), MaxRecordPods)
	case claims > MaxRecordClaims:
		err = fmt.Errorf("%d claims, more than the %d a commit record holds", claims, MaxRecordClaims)
	default:
		if n := recordBound(g); n > MaxRecordTotalBytes {
			err = fmt.Errorf("its commit record could take %d bytes (%d members, %d claims), more than the %d it may", n, len(g.Members), claims, MaxRecordTotalBytes)
		}
	}
	if err != nil {
		return fmt.Errorf("podgroup %s: %w: %w", g.Key(), err, placement.ErrUnsupported)
	}
	return nil
}

// recordBound is an upper bound of the JSON of any commit record of g:
// every member placed, on a node of its own with the longest name, every
// claim allocated, and each shared claim reserved for every member (a
// claim several members name counts once per member, which is more than
// its one entry naming them all). A byte that JSON may escape counts 6.
func recordBound(g *placement.Gang) int {
	const (
		header   = 256                 // keys, braces, version
		nodeName = 253 + 3             // a DNS subdomain, quoted, comma
		pod      = 24 + 7              // keys and quotes; index and comma
		claim    = 32 + 40 + 7         // fingerprint; keys and quotes; comma
		ref      = 6                   // a pod index and its comma
		text     = 6 * MaxRecordText   // domain or key, escaped
		group    = 6 * (63 + 253 + 36) // namespace, name, uid
	)
	n := header + 2*text + group
	claimBytes := func(name string, uid types.UID, refs int) int {
		return claim + jsonLen(name) + jsonLen(string(uid)) + refs*ref
	}
	for _, c := range g.SharedClaims {
		n += claimBytes(c.Name, c.UID, len(g.Members))
	}
	for _, m := range g.Members {
		n += nodeName + pod + jsonLen(m.Pod.Name) + jsonLen(string(m.Pod.UID))
		for _, c := range m.Claims {
			n += claimBytes(c.Name, c.UID, 1)
		}
	}
	return n
}

// jsonLen bounds the length of s in JSON: a byte that may be escaped
// counts 6.
func jsonLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < 0x20 || b >= 0x7f || b == '"' || b == '\\' || b == '<' || b == '>' || b == '&' {
			n += 5
		}
	}
	return n
}
