package commit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/commit/recordwire"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// A record too large for one object is stored in parts, written and read
// as one record:
//   - The head is the object a one-object record would be (its name, its
//     label): it holds the first part of the JSON under RecordKey and, under
//     RecordPartsKey, the header: the generation (the first 8 bytes of the
//     JSON's SHA-256, hex), the number of further parts, and the JSON's
//     SHA-256. Part i (1…count) is vocab.RecordPartName(head, gen, i),
//     labelled with the kind's PartLabel (value: the generation).
//   - The parts are created before the head: a head exists only once all
//     its parts do, and the head is written before the commit's first
//     claim write. Parts without their head are orphans of a crash (or a
//     failed create) before anything else of that commit was written;
//     the next term's recovery deletes them (SweepParts), and a failed
//     create deletes those it made.
//   - A read joins the head's part and the others, read live, and checks
//     the SHA-256 before the record is decoded and validated: a part that
//     is missing, of another generation or changed makes the whole record
//     invalid (errBadRecord), so recovery never acts on a partial set.
//   - A delete removes the head first (with its UID as precondition), then
//     the parts; a part left behind is an orphan.
const (
	// MaxRecordChunks bounds the objects one record is stored in.
	MaxRecordChunks = 64
	// RecordPartsKey is the head's data key holding the parts header.
	RecordPartsKey = "parts"
	// maxPartsHeader bounds the header's JSON.
	maxPartsHeader = 1024
)

// errBadRecord marks a record that cannot be trusted: it is rejected and
// deleted, never acted on. Errors without it are the API's.
var errBadRecord = errors.New("invalid record")

// partsHeader is the head's RecordPartsKey.
type partsHeader struct {
	Gen    string `json:"gen"`
	Count  int    `json:"count"`
	SHA256 string `json:"sha256"`
}

// Objects stores raw as a record named name: the head alone when raw fits
// one object, else the head and its parts (at most MaxRecordChunks objects
// in all, only for a kind with a PartLabel).
func (k Kind) Objects(namespace, name string, raw []byte) (*v1.ConfigMap, []*v1.ConfigMap, error) {
	if len(raw) <= MaxRecordBytes {
		return k.Object(namespace, name, raw), nil, nil
	}
	if k.PartLabel == "" {
		return nil, nil, fmt.Errorf("%s is %d bytes, over the limit of %d", k.What, len(raw), MaxRecordBytes)
	}
	pieces := splitRecord(raw, MaxRecordBytes)
	if len(pieces) > MaxRecordChunks {
		return nil, nil, fmt.Errorf("%s is %d bytes, over the limit of %d objects of %d bytes", k.What, len(raw), MaxRecordChunks, MaxRecordBytes)
	}
	sum := sha256.Sum256(raw)
	h := partsHeader{Gen: hex.EncodeToString(sum[:8]), Count: len(pieces) - 1, SHA256: hex.EncodeToString(sum[:])}
	hdr, err := json.Marshal(h)
	if err != nil {
		return nil, nil, fmt.Errorf("encode %s parts: %w", k.What, err)
	}
	head := k.Object(namespace, name, pieces[0])
	head.Data[RecordPartsKey] = string(hdr)
	parts := make([]*v1.ConfigMap, 0, h.Count)
	for i := 1; i < len(pieces); i++ {
		p := k.Object(namespace, vocab.RecordPartName(name, h.Gen, i), pieces[i])
		delete(p.Labels, k.Label)
		p.Labels[k.PartLabel] = h.Gen
		parts = append(parts, p)
	}
	return head, parts, nil
}

// splitRecord cuts raw into pieces of at most n bytes (n ≥ 4), never
// inside a UTF-8 sequence: each piece is a valid string of a ConfigMap.
func splitRecord(raw []byte, n int) [][]byte {
	var out [][]byte
	for len(raw) > n {
		cut := n
		for cut > n-utf8.UTFMax && !utf8.RuneStart(raw[cut]) {
			cut--
		}
		out = append(out, raw[:cut])
		raw = raw[cut:]
	}
	return append(out, raw)
}

// CreateRecord creates a record: its parts first (in parallel), then its
// head (Create). When a create fails, the parts it made are deleted again.
// It returns the head as created.
func (s *Store) CreateRecord(ctx context.Context, k Kind, object string, head *v1.ConfigMap, parts []*v1.ConfigMap) (*v1.ConfigMap, error) {
	err := Parallel(ctx, s.cfg.Parallelism, len(parts), func(ctx context.Context, i int) error {
		_, err := s.Create(ctx, Kind{What: k.What, CreateStep: k.CreateStep, Replace: true}, object, parts[i])
		return err
	})
	var out *v1.ConfigMap
	if err == nil {
		out, err = s.Create(ctx, k, object, head)
	}
	if err != nil && len(parts) > 0 {
		s.deleteParts(ctx, k, object, parts)
	}
	return out, err
}

// ReadRecord returns the whole JSON of a record: the head's part, joined
// with the others' (read live) when it has any. An error wrapping
// errBadRecord says the record is invalid; any other, that the API failed.
func (s *Store) ReadRecord(ctx context.Context, head *v1.ConfigMap) ([]byte, error) {
	first, ok := head.Data[RecordKey]
	if !ok {
		return nil, fmt.Errorf("%w: no %q key", errBadRecord, RecordKey)
	}
	if len(first) > MaxRecordBytes {
		return nil, fmt.Errorf("%w: record is %d bytes, over the limit of %d", errBadRecord, len(first), MaxRecordBytes)
	}
	hraw, chunked := head.Data[RecordPartsKey]
	if !chunked {
		return []byte(first), nil
	}
	h, err := parseParts(hraw)
	if err != nil {
		return nil, err
	}
	pieces := make([]string, h.Count+1)
	pieces[0] = first
	cms := s.cfg.Client.CoreV1().ConfigMaps(head.Namespace)
	err = Parallel(ctx, s.cfg.Parallelism, h.Count, func(ctx context.Context, i int) error {
		name := vocab.RecordPartName(head.Name, h.Gen, i+1)
		p, err := cms.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return fmt.Errorf("%w: part %d of %d (%s) is missing", errBadRecord, i+1, h.Count, name)
		case err != nil:
			return fmt.Errorf("read record part %s: %w", name, err)
		case len(p.Data[RecordKey]) > MaxRecordBytes:
			return fmt.Errorf("%w: part %s is %d bytes, over the limit of %d", errBadRecord, name, len(p.Data[RecordKey]), MaxRecordBytes)
		}
		pieces[i+1] = p.Data[RecordKey]
		return nil
	})
	if err != nil {
		return nil, err
	}
	raw := []byte(strings.Join(pieces, ""))
	if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:]) != h.SHA256 {
		return nil, fmt.Errorf("%w: its %d parts do not match the head's SHA-256", errBadRecord, h.Count+1)
	}
	return raw, nil
}

// parseParts decodes and checks a head's parts header.
func parseParts(raw string) (partsHeader, error) {
	var h partsHeader
	if len(raw) > maxPartsHeader {
		return h, fmt.Errorf("%w: parts header is %d bytes, over the limit of %d", errBadRecord, len(raw), maxPartsHeader)
	}
	if err := recordwire.DecodeStrict([]byte(raw), "parts header", &h); err != nil {
		return h, fmt.Errorf("%w: %w", errBadRecord, err)
	}
	var p Problems
	if h.Count < 1 || h.Count >= MaxRecordChunks {
		p.Addf("%d parts, want 1..%d", h.Count, MaxRecordChunks-1)
	}
	if b, err := hex.DecodeString(h.Gen); err != nil || len(b) != 8 || h.Gen != strings.ToLower(h.Gen) {
		p.Addf("generation %q is not 16 lower-case hex digits", Shorten(h.Gen, 40))
	}
	if b, err := hex.DecodeString(h.SHA256); err != nil || len(b) != sha256.Size {
		p.Addf("sha256 %q is not a SHA-256", Shorten(h.SHA256, 80))
	}
	if err := p.Err(); err != nil {
		return h, fmt.Errorf("%w: parts header: %w", errBadRecord, err)
	}
	return h, nil
}

// DeleteRecord deletes a record: its head (Delete), then its parts. A
// part that cannot be deleted is logged and left to SweepParts.
func (s *Store) DeleteRecord(ctx context.Context, k Kind, object string, head *v1.ConfigMap) error {
	if err := s.Delete(ctx, k, object, head); err != nil {
		return err
	}
	hraw, chunked := head.Data[RecordPartsKey]
	if !chunked {
		return nil
	}
	h, err := parseParts(hraw)
	if err != nil {
		return nil // no parts to name: orphans, if any, for SweepParts
	}
	parts := make([]*v1.ConfigMap, h.Count)
	for i := range parts {
		parts[i] = &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: head.Namespace, Name: vocab.RecordPartName(head.Name, h.Gen, i+1)}}
	}
	s.deleteParts(ctx, k, object, parts)
	return nil
}

// deleteParts deletes parts (without preconditions: a part's name holds
// its generation), logging the failures.
func (s *Store) deleteParts(ctx context.Context, k Kind, object string, parts []*v1.ConfigMap) {
	err := Parallel(ctx, s.cfg.Parallelism, len(parts), func(ctx context.Context, i int) error {
		if err := s.cfg.Gate.Check(k.DeleteStep, object); err != nil {
			return err
		}
		err := s.cfg.Client.CoreV1().ConfigMaps(parts[i].Namespace).Delete(ctx, parts[i].Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s part %s: %w", k.What, parts[i].Name, err)
		}
		return nil
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Deleting record parts failed; the next term's recovery deletes them", "kind", k.What, "parts", len(parts))
	}
}

// SweepParts deletes the parts of kind k that belong to no head in heads
// (by name and generation): orphans of a crash or a failed create. It runs
// when no record of the kind is being written (recovery, before the first
// attempt); a failure is logged and left to the next term.
func (s *Store) SweepParts(ctx context.Context, k Kind, heads []*v1.ConfigMap) {
	if k.PartLabel == "" {
		return
	}
	list, err := s.cfg.Client.CoreV1().ConfigMaps(s.cfg.RecordNamespace).List(ctx, metav1.ListOptions{LabelSelector: k.PartLabel})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Listing record parts failed; the next term deletes orphans", "kind", k.What)
		return
	}
	keep := map[string]bool{}
	for _, head := range heads {
		if h, err := parseParts(head.Data[RecordPartsKey]); err == nil {
			for i := 1; i <= h.Count; i++ {
				keep[vocab.RecordPartName(head.Name, h.Gen, i)] = true
			}
		}
	}
	var orphans []*v1.ConfigMap
	for i := range list.Items {
		if p := &list.Items[i]; strings.HasPrefix(p.Name, k.Prefix) && !keep[p.Name] {
			orphans = append(orphans, p)
		}
	}
	if len(orphans) > 0 {
		klog.FromContext(ctx).Info("Deleting orphaned record parts", "kind", k.What, "parts", len(orphans))
		s.deleteParts(ctx, k, "orphaned "+k.What+" parts", orphans)
	}
}
