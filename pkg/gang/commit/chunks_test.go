package commit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpufabric/gpufabric/pkg/gang/commit/recordwire"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

const recordNS = "gpufabric-system"

// uuid is a UID shaped like the apiserver's, unique per kind and i.
func uuid(kind, i int) types.UID {
	return types.UID(fmt.Sprintf("%08x-%04x-4%03x-8000-%012x", i*2654435761%(1<<32), kind, i%4096, i))
}

// jobRecord is the record of a Job gang of pods members with claims
// claims each, named as the Job and claim-template controllers name them
// ("<job>-<index>-<suffix>", "<pod>-<claim>-<suffix>"), 8 pods per node,
// every claim allocated.
func jobRecord(pods, claims int) *commitRecord {
	rec := &commitRecord{Version: recordwire.Version2, Root: Root{Kind: KindPodGroup, Namespace: "team-research", Name: "pretrain-llama-70b-worker", UID: "uid-pg"},
		Groups: []recordwire.Group{{Namespace: "team-research", Name: "pretrain-llama-70b-worker", UID: "uid-pg", Domain: "rack-07", TopologyKey: "gpufabric.dev/rack"}}}
	for i := range pods {
		name := fmt.Sprintf("pretrain-llama-70b-worker-%d-%05x", i, (i*7919)%(1<<20))
		rec.Pods = append(rec.Pods, recordwire.Pod{Name: name, UID: uuid(0, i), Node: fmt.Sprintf("gpu-rack%02d-node%03d", i/8/32, i/8%32)})
		for c := range claims {
			rec.Claims = append(rec.Claims, recordwire.Claim{Name: fmt.Sprintf("%s-gpus%d-%05x", name, c, (i*31+c)%(1<<20)), UID: uuid(1+c, i),
				Pods: []string{name}, Allocation: fmt.Sprintf("%032x", i*4+c)})
		}
	}
	return rec
}

// storeWith is a Store on a fake clientset holding objects.
func storeWith(objects ...runtime.Object) (*Store, *fake.Clientset) {
	client := fake.NewClientset(objects...)
	return newStore(Config{Client: client, RecordNamespace: recordNS, Parallelism: 4, Gate: &gate.Gate{}}), client
}

// TestRecordOf10000PodsFits: the record of a 10,000-pod Job gang with two
// claims per pod (about 4.5 MB of JSON; one object holds 900 KiB) is
// stored in a few parts, each under the object limit, and reads back
// whole to the same record. Before records were split, such a record
// could never be written and the gang never committed.
func TestRecordOf10000PodsFits(t *testing.T) {
	for _, tc := range []struct{ pods, claims int }{{2000, 2}, {10000, 2}, {MaxRecordPods, 8}} {
		t.Run(fmt.Sprintf("%dx%d", tc.pods, tc.claims), func(t *testing.T) {
			rec := jobRecord(tc.pods, tc.claims)
			if err := rec.Validate(); err != nil {
				t.Fatal(err)
			}
			raw := encode(t, rec)
			head, parts, err := CommitRecords.Objects(recordNS, validName, raw)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d pods × %d claims: %d bytes in %d objects", tc.pods, tc.claims, len(raw), 1+len(parts))
			for _, cm := range append([]*v1.ConfigMap{head}, parts...) {
				if n := len(cm.Data[RecordKey]); n > MaxRecordBytes || !utf8.ValidString(cm.Data[RecordKey]) {
					t.Errorf("%s holds %d bytes (limit %d), valid UTF-8 %v", cm.Name, n, MaxRecordBytes, utf8.ValidString(cm.Data[RecordKey]))
				}
				if !strings.HasPrefix(cm.Name, vocab.RecordPrefix) {
					t.Errorf("part %s outside the records' prefix (the chart's admission policy)", cm.Name)
				}
			}
			if tc.pods == 2000 && len(parts) != 0 {
				t.Errorf("the 2,000-pod record takes %d objects, want one (compact JSON)", 1+len(parts))
			}
			store, _ := storeWith()
			created, err := store.CreateRecord(t.Context(), CommitRecords, "team-research/pretrain", head, parts)
			if err != nil {
				t.Fatal(err)
			}
			back, err := store.ReadRecord(t.Context(), created)
			if err != nil {
				t.Fatal(err)
			}
			got, err := recordwire.Decode(created.Name, back)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(rec, got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", Shorten(diff, 2000))
			}
		})
	}
}

// TestSplitRecord: pieces are at most n bytes, never split a UTF-8
// sequence, and join to the input.
func TestSplitRecord(t *testing.T) {
	raw := []byte(strings.Repeat("aé€😀", 1000))
	for _, n := range []int{4, 5, 7, 1000} {
		pieces := splitRecord(raw, n)
		var joined []byte
		for _, p := range pieces {
			if len(p) > n || len(p) == 0 || !utf8.Valid(p) {
				t.Fatalf("n=%d: piece of %d bytes, valid %v", n, len(p), utf8.Valid(p))
			}
			joined = append(joined, p...)
		}
		if string(joined) != string(raw) {
			t.Fatalf("n=%d: pieces do not join to the input", n)
		}
	}
}

// TestRecordTooLarge: a record past MaxRecordChunks objects is refused
// before anything is written, and a kind without parts takes one object.
func TestRecordTooLarge(t *testing.T) {
	raw := []byte(`"` + strings.Repeat("x", MaxRecordChunks*MaxRecordBytes) + `"`)
	if _, _, err := CommitRecords.Objects(recordNS, validName, raw); err == nil || !strings.Contains(err.Error(), "over the limit of 64 objects") {
		t.Errorf("error %v, want the objects' limit", err)
	}
	if _, _, err := (Kind{What: "nomination record"}).Objects(recordNS, "n", raw[:MaxRecordBytes+1]); err == nil {
		t.Errorf("a kind without parts split a record")
	}
}

// chunkedRecord writes a 5,000-pod record in parts and returns its head
// as created, with the store and clientset.
func chunkedRecord(t *testing.T) (*v1.ConfigMap, []*v1.ConfigMap, *Store, *fake.Clientset) {
	t.Helper()
	head, parts, err := CommitRecords.Objects(recordNS, validName, encode(t, jobRecord(5000, 2)))
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) < 2 {
		t.Fatalf("%d parts, the test wants at least 2", len(parts))
	}
	store, client := storeWith()
	created, err := store.CreateRecord(t.Context(), CommitRecords, "ns/pg", head, parts)
	if err != nil {
		t.Fatal(err)
	}
	return created, parts, store, client
}

// TestReadRecordPartial: a record whose parts are not all there as the
// head wrote them is invalid as a whole (errBadRecord: rejected, never
// acted on); an API error is not.
func TestReadRecordPartial(t *testing.T) {
	tests := []struct {
		name    string
		change  func(ctx context.Context, t *testing.T, c *fake.Clientset, head *v1.ConfigMap, parts []*v1.ConfigMap)
		want    string
		invalid bool
	}{
		{"whole", func(context.Context, *testing.T, *fake.Clientset, *v1.ConfigMap, []*v1.ConfigMap) {}, "", false},
		{"part missing", func(ctx context.Context, t *testing.T, c *fake.Clientset, _ *v1.ConfigMap, parts []*v1.ConfigMap) {
			must(t, c.CoreV1().ConfigMaps(recordNS).Delete(ctx, parts[1].Name, metav1.DeleteOptions{}))
		}, "part 2 of 2", true},
		{"forged part", func(ctx context.Context, t *testing.T, c *fake.Clientset, _ *v1.ConfigMap, parts []*v1.ConfigMap) {
			p := parts[0].DeepCopy()
			p.Data[RecordKey] = strings.Replace(p.Data[RecordKey], `"n":"p`, `"n":"q`, 1) // same size
			_, err := c.CoreV1().ConfigMaps(recordNS).Update(ctx, p, metav1.UpdateOptions{})
			must(t, err)
		}, "do not match the head's SHA-256", true},
		{"part of another generation", func(ctx context.Context, t *testing.T, c *fake.Clientset, _ *v1.ConfigMap, parts []*v1.ConfigMap) {
			must(t, c.CoreV1().ConfigMaps(recordNS).Delete(ctx, parts[0].Name, metav1.DeleteOptions{}))
			p := parts[0].DeepCopy()
			p.Name = vocab.RecordPartName(validName, "0000000000000000", 1)
			_, err := c.CoreV1().ConfigMaps(recordNS).Create(ctx, p, metav1.CreateOptions{})
			must(t, err)
		}, "part 1 of 2", true},
		{"API error", func(_ context.Context, _ *testing.T, c *fake.Clientset, _ *v1.ConfigMap, _ []*v1.ConfigMap) {
			c.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewServiceUnavailable("etcd is away")
			})
		}, "etcd is away", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			head, parts, store, client := chunkedRecord(t)
			tt.change(t.Context(), t, client, head, parts)
			raw, err := store.ReadRecord(t.Context(), head)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if _, err := recordwire.Decode(head.Name, raw); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || errors.Is(err, errBadRecord) != tt.invalid {
				t.Errorf("error %v, want one containing %q, invalid %v", err, tt.want, tt.invalid)
			}
		})
	}
}

// TestReadRecordForgedHead: a head whose parts header or first part is
// malformed or oversized is invalid.
func TestReadRecordForgedHead(t *testing.T) {
	for _, tt := range []struct{ name, parts, first, want string }{
		{"no parts", `{"gen":"0011223344556677","count":0,"sha256":"` + strings.Repeat("0", 64) + `"}`, "{}", "0 parts, want 1..63"},
		{"too many parts", `{"gen":"0011223344556677","count":64,"sha256":"` + strings.Repeat("0", 64) + `"}`, "{}", "64 parts, want 1..63"},
		{"generation", `{"gen":"../x","count":1,"sha256":"` + strings.Repeat("0", 64) + `"}`, "{}", `generation "../x"`},
		{"upper-case generation", `{"gen":"00112233445566AA","count":1,"sha256":"` + strings.Repeat("0", 64) + `"}`, "{}", `generation "00112233445566AA"`},
		{"unknown field", `{"gen":"0011223344556677","count":1,"sha256":"` + strings.Repeat("0", 64) + `","more":1}`, "{}", `unknown field "more"`},
		{"oversized header", strings.Repeat(" ", maxPartsHeader+1), "{}", "parts header is"},
		{"oversized first part", "", strings.Repeat("x", MaxRecordBytes+1), "over the limit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store, _ := storeWith()
			head := rawRecordConfigMap(tt.first)
			if tt.parts != "" {
				head.Data[RecordPartsKey] = tt.parts
			}
			_, err := store.ReadRecord(t.Context(), head)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, errBadRecord) {
				t.Errorf("error %v, want an invalid record containing %q", err, tt.want)
			}
		})
	}
}

// TestSweepParts: parts that no head names (a crash between the parts and
// the head, or a head deleted before its parts) are deleted; those of a
// live head are kept.
func TestSweepParts(t *testing.T) {
	head, parts, store, client := chunkedRecord(t)
	orphan := parts[0].DeepCopy()
	orphan.Name = vocab.RecordPartName(vocab.RecordName("uid-gone"), "0011223344556677", 1)
	stale := parts[0].DeepCopy()
	stale.Name = vocab.RecordPartName(validName, "0011223344556677", 1)
	for _, p := range []*v1.ConfigMap{orphan, stale} {
		_, err := client.CoreV1().ConfigMaps(recordNS).Create(t.Context(), p, metav1.CreateOptions{})
		must(t, err)
	}
	store.SweepParts(t.Context(), CommitRecords, []*v1.ConfigMap{head})
	list, err := client.CoreV1().ConfigMaps(recordNS).List(t.Context(), metav1.ListOptions{})
	must(t, err)
	var names []string
	for _, cm := range list.Items {
		names = append(names, cm.Name)
	}
	want := []string{head.Name, parts[0].Name, parts[1].Name}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("objects after the sweep (-want +got):\n%s", diff)
	}
	store.SweepParts(t.Context(), CommitRecords, nil)
	list, err = client.CoreV1().ConfigMaps(recordNS).List(t.Context(), metav1.ListOptions{})
	must(t, err)
	if len(list.Items) != 1 {
		t.Errorf("%d objects left without the head, want the head only", len(list.Items))
	}
}

// TestDeleteRecordDeletesParts: a record's delete removes the head and all
// its parts.
func TestDeleteRecordDeletesParts(t *testing.T) {
	head, _, store, client := chunkedRecord(t)
	must(t, store.DeleteRecord(t.Context(), CommitRecords, "ns/pg", head))
	list, err := client.CoreV1().ConfigMaps(recordNS).List(t.Context(), metav1.ListOptions{})
	must(t, err)
	if len(list.Items) != 0 {
		t.Errorf("%d objects left after the delete", len(list.Items))
	}
}

// TestCreateRecordFailureLeavesNoParts: when the head cannot be created,
// the parts already created are deleted again.
func TestCreateRecordFailureLeavesNoParts(t *testing.T) {
	head, parts, err := CommitRecords.Objects(recordNS, validName, encode(t, jobRecord(3000, 2)))
	must(t, err)
	store, client := storeWith()
	client.PrependReactor("create", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.CreateAction).GetObject().(*v1.ConfigMap).Name == validName {
			return true, nil, apierrors.NewInternalError(errors.New("boom"))
		}
		return false, nil, nil
	})
	if _, err := store.CreateRecord(t.Context(), CommitRecords, "ns/pg", head, parts); err == nil {
		t.Fatal("created")
	}
	list, err := client.CoreV1().ConfigMaps(recordNS).List(t.Context(), metav1.ListOptions{})
	must(t, err)
	if len(list.Items) != 0 {
		t.Errorf("%d parts left after a failed create", len(list.Items))
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// FuzzParseParts: any parts header either fails as an invalid record or
// names 1..63 parts by a 16-hex-digit generation with a SHA-256, so the
// part names it yields are bounded and stay under the record's prefix.
func FuzzParseParts(f *testing.F) {
	f.Add(`{"gen":"0011223344556677","count":2,"sha256":"` + strings.Repeat("ab", 32) + `"}`)
	f.Add(`{"gen":"../../x","count":-1}`)
	f.Add(`{"count":1e9}`)
	f.Fuzz(func(t *testing.T, raw string) {
		h, err := parseParts(raw)
		if err != nil {
			if !errors.Is(err, errBadRecord) {
				t.Fatalf("error %v is not an invalid record", err)
			}
			return
		}
		if h.Count < 1 || h.Count >= MaxRecordChunks || len(h.Gen) != 16 || len(h.SHA256) != 64 {
			t.Fatalf("accepted %+v", h)
		}
		if name := vocab.RecordPartName(validName, h.Gen, h.Count); !strings.HasPrefix(name, validName+".") || len(validation.IsDNS1123Subdomain(name)) > 0 {
			t.Fatalf("part name %q", name)
		}
	})
}
