package sim

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"
)

// Chart geometry and colors (one per policy, in report order).
const (
	chartW, chartH           = 1000, 400
	padL, padR, padT, padB   = 60, 250, 40, 50
	chartBuckets             = 320
	plotW, plotH             = chartW - padL - padR, chartH - padT - padB
	chartColors              = "#1f77b4,#d62728,#2ca02c,#ff7f0e,#9467bd,#8c564b"
	chartFont                = `font-family="sans-serif" font-size="12"`
	chartHeldNote            = "dashed: + GPUs held by partial gangs"
	chartTitleFormat         = "GPUs in running gangs (%% of %d) over simulated time — %s"
	chartGridStrokeAttribute = `stroke="#ddd"`
)

// SVG writes a line chart of fabric occupancy over time, one line per
// policy: the time average of GPUs in running gangs per bucket of the
// horizon, plus a dashed line including GPUs held by pods of partial gangs
// for policies that had any.
func (rep *Report) SVG(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", chartW, chartH)
	fmt.Fprintf(&b, `<text x="%d" y="22" %s font-weight="bold">%s</text>`+"\n", padL, chartFont,
		escape(fmt.Sprintf(chartTitleFormat, rep.TotalGPUs, rep.Fabric)))
	hours := float64(rep.Options.Horizon) / 3600
	for i := 0; i <= 10; i++ { // y grid every 10%
		y := padT + plotH - plotH*i/10
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" %s/><text x="%d" y="%d" %s text-anchor="end">%d%%</text>`+"\n",
			padL, y, padL+plotW, y, chartGridStrokeAttribute, padL-6, y+4, chartFont, i*10)
	}
	step := max(1, int(hours/10+0.5))
	for h := 0; float64(h) <= hours; h += step { // x ticks in hours
		x := padL + int(float64(plotW)*float64(h)/max(hours, 1e-9))
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" %s/><text x="%d" y="%d" %s text-anchor="middle">%d h</text>`+"\n",
			x, padT, x, padT+plotH, chartGridStrokeAttribute, x, padT+plotH+18, chartFont, h)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" %s text-anchor="middle">simulated time</text>`+"\n", padL+plotW/2, chartH-8, chartFont)
	colors := strings.Split(chartColors, ",")
	for i, r := range rep.Results {
		color := colors[i%len(colors)]
		busy, held := r.buckets(chartBuckets)
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.6" points="%s"/>`+"\n", color, points(busy, r.TotalGPUs))
		if r.Teardowns > 0 || anyHeld(r.Series) {
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1" stroke-dasharray="4 3" points="%s"/>`+"\n", color, points(held, r.TotalGPUs))
		}
		y := padT + 10 + 20*i
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/><text x="%d" y="%d" %s>%s</text>`+"\n",
			padL+plotW+14, y, padL+plotW+34, y, color, padL+plotW+40, y+4, chartFont, escape(r.Policy))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" %s>%s</text>`+"\n", padL+plotW+14, padT+20+20*len(rep.Results), chartFont, chartHeldNote)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// buckets returns the time average of busy and busy+held GPUs over n equal
// buckets of [0, Horizon].
func (r *Result) buckets(n int) (busy, held []float64) {
	busy, held = make([]float64, n), make([]float64, n)
	if r.Horizon <= 0 {
		return busy, held
	}
	width := float64(r.Horizon) / float64(n)
	for i, s := range r.Series {
		end := float64(r.Horizon)
		if i+1 < len(r.Series) {
			end = float64(r.Series[i+1].T)
		}
		for t := float64(s.T); t < end; {
			k := int(t / width)
			if float64(k+1)*width <= t { // t/width rounded down across a bucket edge
				k++
			}
			next := end
			if k < n-1 {
				next = min(end, float64(k+1)*width)
			}
			k = min(k, n-1)
			busy[k] += float64(s.Busy) * (next - t) / width
			held[k] += float64(s.Busy+s.Held) * (next - t) / width
			t = next
		}
	}
	return busy, held
}

func points(v []float64, total int) string {
	var b strings.Builder
	for i, g := range v {
		x := float64(padL) + float64(plotW)*(float64(i)+0.5)/float64(len(v))
		y := float64(padT+plotH) - float64(plotH)*g/float64(total)
		fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
	}
	return strings.TrimSpace(b.String())
}

func anyHeld(s []Sample) bool {
	for _, x := range s {
		if x.Held > 0 {
			return true
		}
	}
	return false
}

func escape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder does not fail
	return b.String()
}
