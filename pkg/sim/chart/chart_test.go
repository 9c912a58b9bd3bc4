package chart

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"
)

// TestWrite: the chart is well-formed SVG with one solid polyline per
// line, a dashed one only for a line with Held, a legend entry per line
// (names escaped), and points inside the plot for 0 and 100 %.
func TestWrite(t *testing.T) {
	c := Chart{Title: "GPUs <busy> & held", Hours: 2, Note: "dashed: held", Lines: []Line{
		{Name: "a&b", Total: 8, Busy: []float64{0, 8}, Held: []float64{4, 8}},
		{Name: "plain", Total: 8, Busy: []float64{2, 2}},
	}}
	var buf bytes.Buffer
	if err := c.Write(&buf); err != nil {
		t.Fatal(err)
	}
	solid, dashed, texts := 0, 0, []string{}
	dec := xml.NewDecoder(bytes.NewReader(buf.Bytes()))
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if el.Name.Local != "polyline" {
				continue
			}
			dash := false
			for _, a := range el.Attr {
				if a.Name.Local == "stroke-dasharray" {
					dash = true
				}
				if a.Name.Local == "points" && strings.Count(a.Value, ",") != 2 {
					t.Errorf("points %q: want 2", a.Value)
				}
			}
			if dash {
				dashed++
			} else {
				solid++
			}
		case xml.CharData:
			texts = append(texts, string(el))
		}
	}
	all := strings.Join(texts, "|")
	if solid != 2 || dashed != 1 {
		t.Errorf("%d solid, %d dashed polylines; want 2 and 1", solid, dashed)
	}
	for _, want := range []string{"GPUs <busy> & held", "a&b", "plain", "dashed: held", "0 h", "2 h", "100%"} {
		if !strings.Contains(all, want) {
			t.Errorf("text %q missing from %q", want, all)
		}
	}
	// 0 GPUs at the plot's bottom, all 8 at its top.
	if !strings.Contains(buf.String(), `points="232.5,350.0 577.5,40.0"`) {
		t.Errorf("first line's points not at the plot's bottom and top: %s", buf.String())
	}
}
