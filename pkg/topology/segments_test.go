package topology

import (
	"strings"
	"testing"
)

func TestParseSegments(t *testing.T) {
	long := strings.Repeat("9", 5000)
	tests := map[string]struct {
		ann      map[string]string
		wantSize int
		wantKey  string
		// wantErr lists what the error must say; nil: no error.
		wantErr []string
	}{
		"none":             {ann: map[string]string{"other": "x"}},
		"nvlink segments":  {ann: seg("16", TopologyKeyNVLinkDomain), wantSize: 16, wantKey: TopologyKeyNVLinkDomain},
		"label level":      {ann: seg("4", "topology.gpufabric.dev/rack"), wantSize: 4, wantKey: "topology.gpufabric.dev/rack"},
		"size one":         {ann: seg("1", "rack"), wantSize: 1, wantKey: "rack"},
		"largest":          {ann: seg("1024", "rack"), wantSize: MaxSegmentSize, wantKey: "rack"},
		"too large":        {ann: seg("1025", "rack"), wantErr: []string{AnnotationSegmentSize, `"1025"`, "1 to 1024"}},
		"zero":             {ann: seg("0", "rack"), wantErr: []string{AnnotationSegmentSize, `"0"`}},
		"leading zero":     {ann: seg("016", "rack"), wantErr: []string{AnnotationSegmentSize, `"016"`}},
		"negative":         {ann: seg("-16", "rack"), wantErr: []string{AnnotationSegmentSize, `"-16"`}},
		"plus sign":        {ann: seg("+16", "rack"), wantErr: []string{AnnotationSegmentSize}},
		"space":            {ann: seg("16 ", "rack"), wantErr: []string{AnnotationSegmentSize}},
		"hex":              {ann: seg("0x10", "rack"), wantErr: []string{AnnotationSegmentSize}},
		"empty size":       {ann: seg("", "rack"), wantErr: []string{AnnotationSegmentSize, `""`}},
		"huge truncated":   {ann: seg(long, "rack"), wantErr: []string{AnnotationSegmentSize, "999...\""}},
		"size without key": {ann: map[string]string{AnnotationSegmentSize: "16"}, wantErr: []string{AnnotationSegmentSize, "without " + AnnotationSegmentTopologyKey}},
		"key without size": {ann: map[string]string{AnnotationSegmentTopologyKey: "rack"}, wantErr: []string{AnnotationSegmentTopologyKey, "without " + AnnotationSegmentSize}},
		"bad key":          {ann: seg("16", "my rack"), wantErr: []string{AnnotationSegmentTopologyKey, `"my rack"`}},
		"empty key":        {ann: seg("16", ""), wantErr: []string{AnnotationSegmentTopologyKey}},
		"long key cut":     {ann: seg("16", strings.Repeat("k", 300)), wantErr: []string{AnnotationSegmentTopologyKey, "kkk...\""}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			size, key, err := ParseSegments(tc.ann)
			if (err != nil) != (tc.wantErr != nil) {
				t.Fatalf("ParseSegments(%v) error = %v, want error %t", tc.ann, err, tc.wantErr != nil)
			}
			if size != tc.wantSize || key != tc.wantKey {
				t.Errorf("ParseSegments = %d, %q; want %d, %q", size, key, tc.wantSize, tc.wantKey)
			}
			if err == nil {
				return
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
			if len(err.Error()) > 600 {
				t.Errorf("error is %d bytes long: the value is not bounded", len(err.Error()))
			}
		})
	}
}

func seg(size, key string) map[string]string {
	return map[string]string{AnnotationSegmentSize: size, AnnotationSegmentTopologyKey: key}
}

// FuzzSegmentSize: any value is refused or is a number in range whose
// decimal form is the value itself; errors stay short.
func FuzzSegmentSize(f *testing.F) {
	for _, s := range []string{"16", "0", "1024", "1025", "-1", " 1", "01", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		n, err := ParseSegmentSize(v)
		if err != nil {
			if n != 0 || len(err.Error()) > 4*maxQuotedValue+200 {
				t.Fatalf("ParseSegmentSize(%q) = %d, %v", v, n, err)
			}
			return
		}
		if n < 1 || n > MaxSegmentSize || strconvItoa(n) != v {
			t.Fatalf("ParseSegmentSize(%q) = %d", v, n)
		}
	})
}

func strconvItoa(n int) string {
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}
