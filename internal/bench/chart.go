package bench

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
)

// Chart layout, in SVG user units (pixels).
const (
	chartWidth  = 980
	labelRight  = 190 // approach names end here
	barLeft     = 200
	barRight    = 760 // value labels start after this
	chartTop    = 76
	rowHeight   = 30
	barHeight   = 18
	axisHeight  = 64 // tick labels and legend below the bars
	colorDB     = "#b7791f"
	colorRedis  = "#2b6cb0"
	colorOvers  = "#c53030"
	colorGrid   = "#d0d0d0"
	colorText   = "#222222"
	colorSubtle = "#666666"
)

// WriteSVG writes a horizontal bar chart of every approach's ops/s on a
// log scale, each bar labelled with its value, as a standalone SVG file.
func WriteSVG(w io.Writer, rep Report) error {
	rs := rep.Results
	lo, hi := logBounds(rs)
	span := math.Log10(hi) - math.Log10(lo)
	x := func(v float64) float64 {
		if v <= lo {
			return barLeft
		}
		return barLeft + (math.Log10(v)-math.Log10(lo))/span*(barRight-barLeft)
	}
	height := chartTop + rowHeight*len(rs) + axisHeight
	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif">`+"\n",
		chartWidth, height, chartWidth, height)
	p(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	m := rep.Machine
	p(`<text x="%d" y="28" font-size="17" font-weight="bold" fill="%s">%s</text>`+"\n", 16, colorText,
		esc(fmt.Sprintf("seckill bench: buys per second on one hot item, %d clients (log scale)", rep.Config.Concurrency)))
	var stores []string
	for _, s := range []string{m.Redis, m.Database} {
		if s != "" {
			stores = append(stores, s)
		}
	}
	p(`<text x="%d" y="50" font-size="12" fill="%s">%s</text>`+"\n", 16, colorSubtle,
		esc(fmt.Sprintf("%s/%s, %d CPUs, %s; %s", m.GOOS, m.GOARCH, m.CPUs, m.Go, strings.Join(stores, ", "))))

	// Grid lines and tick labels at every power of ten.
	bottom := chartTop + rowHeight*len(rs)
	for e := math.Log10(lo); e <= math.Log10(hi)+1e-9; e++ {
		v := math.Pow(10, math.Round(e))
		gx := x(v)
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="1"/>`+"\n", gx, chartTop-6, gx, bottom, colorGrid)
		p(`<text x="%.1f" y="%d" font-size="11" text-anchor="middle" fill="%s">%s</text>`+"\n", gx, bottom+16, colorSubtle, esc(shortNumber(v)))
	}
	p(`<text x="%d" y="%d" font-size="11" text-anchor="middle" fill="%s">ops/s</text>`+"\n", (barLeft+barRight)/2, bottom+32, colorSubtle)

	for i, r := range rs {
		y := chartTop + rowHeight*i
		color := colorRedis
		if r.DB {
			color = colorDB
		}
		if r.Oversold() > 0 {
			color = colorOvers
		}
		v := r.OpsPerSec()
		width := math.Max(x(v)-barLeft, 1)
		label := thousands(int64(math.Round(v))) + " ops/s"
		if best := rep.BestDB(); best > 0 {
			label += ", " + formatRatio(v/best) + "x best db"
		}
		if r.Oversold() > 0 {
			label += ", oversold " + thousands(r.Oversold())
		}
		p(`<text x="%d" y="%d" font-size="13" text-anchor="end" fill="%s">%s</text>`+"\n", labelRight, y+barHeight-4, colorText, esc(r.Name))
		p(`<rect class="bar" data-approach="%s" x="%d" y="%d" width="%.1f" height="%d" fill="%s"><title>%s</title></rect>`+"\n",
			esc(r.Name), barLeft, y, width, barHeight, color, esc(r.Name+": "+label))
		p(`<text x="%.1f" y="%d" font-size="12" fill="%s">%s</text>`+"\n", barLeft+width+6, y+barHeight-4, colorText, esc(label))
	}

	// Legend.
	ly := bottom + 48
	lx := barLeft
	for _, l := range []struct{ color, text string }{
		{colorDB, "database"}, {colorRedis, "Redis"}, {colorOvers, "oversold (no atomicity)"},
	} {
		p(`<rect x="%d" y="%d" width="12" height="12" fill="%s"/>`+"\n", lx, ly-10, l.color)
		p(`<text x="%d" y="%d" font-size="12" fill="%s">%s</text>`+"\n", lx+17, ly, colorText, esc(l.text))
		lx += 30 + 7*len(l.text)
	}
	p("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// logBounds returns the powers of ten around every positive ops/s.
func logBounds(rs []Result) (lo, hi float64) {
	minV, maxV := math.Inf(1), 0.0
	for _, r := range rs {
		if v := r.OpsPerSec(); v > 0 {
			minV, maxV = math.Min(minV, v), math.Max(maxV, v)
		}
	}
	if maxV == 0 {
		return 1, 10
	}
	lo = math.Pow(10, math.Floor(math.Log10(minV)))
	hi = math.Pow(10, math.Ceil(math.Log10(maxV)))
	if hi <= lo {
		hi = lo * 10
	}
	return lo, hi
}

// shortNumber writes a power of ten as 1, 10, 100, 1k, 10k, 100k, 1M...
func shortNumber(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%gG", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%gk", v/1e3)
	}
	return fmt.Sprintf("%g", v)
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
