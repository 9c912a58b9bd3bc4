// Package chart draws the simulator's occupancy chart as SVG: one line per
// policy over simulated time, the share of the fabric's GPUs its running
// gangs use, and a dashed line adding the GPUs that pods of partial gangs
// hold. It knows nothing of the simulator: per-bucket averages in, SVG out.
package chart

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"
)

// Buckets is how many equal spans of the horizon a line has points for.
const Buckets = 320

// Geometry and colors (one per line, in order).
const (
	width, height          = 1000, 400
	padL, padR, padT, padB = 60, 250, 40, 50
	plotW, plotH           = width - padL - padR, height - padT - padB
	colors                 = "#1f77b4,#d62728,#2ca02c,#ff7f0e,#9467bd,#8c564b"
	font                   = `font-family="sans-serif" font-size="12"`
	gridStroke             = `stroke="#ddd"`
)

// Line is one policy's line.
type Line struct {
	Name string
	// Total is 100 % (GPUs); Busy and Held the averages per bucket of GPUs
	// in running gangs and of those plus held ones; Held nil: no dashed
	// line.
	Total      int
	Busy, Held []float64
}

// Chart is the whole chart: its title, the horizon in hours, a note under
// the legend, and the lines.
type Chart struct {
	Title string
	Hours float64
	Note  string
	Lines []Line
}

// Write writes the chart as one SVG document.
func (c Chart) Write(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="22" %s font-weight="bold">%s</text>`+"\n", padL, font, escape(c.Title))
	for i := 0; i <= 10; i++ { // y grid every 10%
		y := padT + plotH - plotH*i/10
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" %s/><text x="%d" y="%d" %s text-anchor="end">%d%%</text>`+"\n",
			padL, y, padL+plotW, y, gridStroke, padL-6, y+4, font, i*10)
	}
	step := max(1, int(c.Hours/10+0.5))
	for h := 0; float64(h) <= c.Hours; h += step { // x ticks in hours
		x := padL + int(float64(plotW)*float64(h)/max(c.Hours, 1e-9))
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" %s/><text x="%d" y="%d" %s text-anchor="middle">%d h</text>`+"\n",
			x, padT, x, padT+plotH, gridStroke, x, padT+plotH+18, font, h)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" %s text-anchor="middle">simulated time</text>`+"\n", padL+plotW/2, height-8, font)
	palette := strings.Split(colors, ",")
	for i, l := range c.Lines {
		color := palette[i%len(palette)]
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.6" points="%s"/>`+"\n", color, points(l.Busy, l.Total))
		if l.Held != nil {
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1" stroke-dasharray="4 3" points="%s"/>`+"\n", color, points(l.Held, l.Total))
		}
		y := padT + 10 + 20*i
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/><text x="%d" y="%d" %s>%s</text>`+"\n",
			padL+plotW+14, y, padL+plotW+34, y, color, padL+plotW+40, y+4, font, escape(l.Name))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" %s>%s</text>`+"\n", padL+plotW+14, padT+20+20*len(c.Lines), font, escape(c.Note))
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func points(v []float64, total int) string {
	var b strings.Builder
	for i, g := range v {
		x := float64(padL) + float64(plotW)*(float64(i)+0.5)/float64(len(v))
		y := float64(padT+plotH) - float64(plotH)*g/float64(max(total, 1))
		fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
	}
	return strings.TrimSpace(b.String())
}

func escape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder does not fail
	return b.String()
}
