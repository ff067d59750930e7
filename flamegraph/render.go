package flamegraph

import (
	"bufio"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"fmt"
	"hash/fnv"
	"io"
	"strconv"
	"strings"
)

//go:embed script.js
var script string

//go:embed style.css
var style string

// Geometry of the drawing, in SVG user units (pixels at 100% zoom).
const (
	defaultWidth   = 1200
	defaultMinPx   = 0.1
	pad            = 10
	frameHeight    = 16
	fontSize       = 12
	headerHeight   = 68
	footerHeight   = 28
	maxDrawnFrames = 1 << 20 // hard cap on rectangles, whatever MinWidthPx says
)

// scene is everything the SVG needs, computed once.
type scene struct {
	opt    Options
	t      *tree
	l      *layout
	width  int
	height int
	minPx  float64
}

func newScene(samples []Sample, opt Options) *scene {
	if opt.Unit == "" {
		opt.Unit = "samples"
	}
	if opt.Title == "" {
		opt.Title = "Flame Graph"
	}
	width := opt.Width
	if width <= 0 {
		width = defaultWidth
	}
	if width < 200 {
		width = 200
	}
	if width > 100000 {
		width = 100000
	}
	minPx := opt.MinWidthPx
	if minPx <= 0 || minPx != minPx {
		minPx = defaultMinPx
	}
	t := buildTree(samples)
	pw := float64(width - 2*pad)
	l := t.place(float64(t.values[0]) * minPx / pw)
	// A pathological MinWidthPx or a profile of many equal tiny stacks
	// could still ask for millions of rectangles; widen the threshold
	// until the drawing is bounded.
	for len(l.frames) > maxDrawnFrames {
		minPx *= 2
		l = t.place(float64(t.values[0]) * minPx / pw)
	}
	s := &scene{opt: opt, t: t, l: l, width: width, minPx: minPx}
	s.height = headerHeight + (l.maxDepth+1)*frameHeight + footerHeight
	return s
}

// kind classifies a frame name for colouring.
func kind(name string) string {
	switch {
	case strings.HasSuffix(name, "[k]"):
		return "k"
	case strings.HasPrefix(name, "[unknown"):
		return "u"
	}
	return "c"
}

// colour is stable per function name: an FNV-1a hash of the raw name picks
// the shade within the palette of the frame's kind (warm for user code,
// aqua for kernel frames ending in "[k]", grey for "[unknown]").
func colour(name string, root bool) string {
	if root {
		return "rgb(250,250,200)"
	}
	h := fnv.New64a()
	io.WriteString(h, name)
	x := h.Sum64()
	v1 := float64(x&0xffff) / 0xffff
	v2 := float64(x>>16&0xffff) / 0xffff
	v3 := float64(x>>32&0xffff) / 0xffff
	var r, g, b int
	switch kind(name) {
	case "k":
		r, g, b = 50+int(60*v1), 165+int(55*v1), 165+int(55*v2)
	case "u":
		c := 170 + int(40*v3)
		r, g, b = c, c, c
	default:
		r, g, b = 205+int(50*v3), int(230*v1), int(55*v2)
	}
	return "rgb(" + strconv.Itoa(r) + "," + strconv.Itoa(g) + "," + strconv.Itoa(b) + ")"
}

// commas formats n with thousands separators.
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	if len(s) <= 3 {
		return s
	}
	var b strings.Builder
	pre := len(s) % 3
	if pre > 0 {
		b.WriteString(s[:pre])
	}
	for i := pre; i < len(s); i += 3 {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s[i : i+3])
	}
	return b.String()
}

func percent(a, b int64) string {
	if b <= 0 {
		return "0.00"
	}
	return strconv.FormatFloat(100*float64(a)/float64(b), 'f', 2, 64)
}

// info is the line under the subtitle: sort order and what was pruned.
func (s *scene) info() string {
	l := s.l
	msg := fmt.Sprintf("%s %s, %d frames; frames sorted alphabetically per level, root at the bottom; click to zoom, Esc resets",
		commas(l.total), s.opt.Unit, len(l.frames)-1)
	if l.prunedFrames > 0 {
		msg += fmt.Sprintf("; %s frames narrower than %g px not drawn (stack tails of %s %s, %s%%)",
			commas(int64(l.prunedFrames)), s.minPx, commas(l.prunedValue), s.opt.Unit, percent(l.prunedValue, l.total))
	}
	return msg
}

// writeSVG writes the <svg> element. standalone adds the XML-only parts
// (namespace declarations are needed either way; the style and script go
// inside the SVG only when it is its own document).
func (s *scene) writeSVG(w *bufio.Writer, standalone bool) {
	l := s.l
	pw := float64(s.width - 2*pad)
	fmt.Fprintf(w, `<svg id="fg" xmlns="http://www.w3.org/2000/svg" version="1.1"`)
	if standalone {
		fmt.Fprintf(w, ` width="%d" height="%d"`, s.width, s.height)
	} else {
		w.WriteString(` width="100%"`)
	}
	fmt.Fprintf(w, ` viewBox="0 0 %d %d" data-width="%d" data-pad="%d" data-font="%d" data-row="%d" data-total="%d" data-unit="%s">`+"\n",
		s.width, s.height, s.width, pad, fontSize, frameHeight, l.total, escapeText(displayName(s.opt.Unit)))
	if standalone {
		w.WriteString("<style><![CDATA[\n")
		w.WriteString(style)
		w.WriteString("]]></style>\n")
	}
	fmt.Fprintf(w, `<rect x="0" y="0" width="%d" height="%d" class="bg"/>`+"\n", s.width, s.height)
	mid := s.width / 2
	fmt.Fprintf(w, `<text x="%d" y="22" class="title">%s</text>`+"\n", mid, escapeText(displayName(s.opt.Title)))
	if s.opt.Subtitle != "" {
		fmt.Fprintf(w, `<text x="%d" y="40" class="sub">%s</text>`+"\n", mid, escapeText(displayName(s.opt.Subtitle)))
	}
	fmt.Fprintf(w, `<text x="%d" y="56" class="info" id="fg-info">%s</text>`+"\n", mid, escapeText(displayName(s.info())))
	fmt.Fprintf(w, `<text x="%d" y="22" class="btn hide" id="fg-unzoom">Reset Zoom</text>`+"\n", pad)
	fmt.Fprintf(w, `<text x="%d" y="22" class="btn end" id="fg-search-btn">Search</text>`+"\n", s.width-pad)
	fmt.Fprintf(w, `<text x="%d" y="40" class="btn end" id="fg-clear">Clear search</text>`+"\n", s.width-pad)
	fmt.Fprintf(w, `<text x="%d" y="%d" class="legend"><tspan class="lc">■ code</tspan> <tspan class="lk">■ kernel [k]</tspan> <tspan class="lu">■ [unknown]</tspan></text>`+"\n", pad, 40)
	fmt.Fprintf(w, `<text x="%d" y="%d" id="fg-details"> </text>`+"\n", pad, s.height-10)
	fmt.Fprintf(w, `<text x="%d" y="%d" class="end" id="fg-matched"></text>`+"\n", s.width-pad, s.height-10)

	base := s.height - footerHeight
	var num []byte
	for i, f := range l.frames {
		raw := s.t.names[f.node]
		name := escapeText(displayName(raw))
		x := float64(pad) + float64(f.offset)/float64(max(l.total, 1))*pw
		wd := float64(f.value) / float64(max(l.total, 1)) * pw
		y := base - (f.depth+1)*frameHeight
		w.WriteString(`<g class="f" id="f`)
		num = strconv.AppendInt(num[:0], int64(i), 10)
		w.Write(num)
		w.WriteString(`" data-o="`)
		w.Write(strconv.AppendInt(num[:0], f.offset, 10))
		w.WriteString(`" data-v="`)
		w.Write(strconv.AppendInt(num[:0], f.value, 10))
		w.WriteString(`" data-d="`)
		w.Write(strconv.AppendInt(num[:0], int64(f.depth), 10))
		w.WriteString(`"><title>`)
		w.WriteString(name)
		w.WriteString("\n")
		w.WriteString(commas(f.value))
		w.WriteString(" ")
		w.WriteString(escapeText(displayName(s.opt.Unit)))
		w.WriteString(", ")
		w.WriteString(percent(f.value, l.total))
		w.WriteString(`%</title><rect x="`)
		w.Write(strconv.AppendFloat(num[:0], x, 'f', 2, 64))
		w.WriteString(`" y="`)
		w.Write(strconv.AppendInt(num[:0], int64(y), 10))
		w.WriteString(`" width="`)
		w.Write(strconv.AppendFloat(num[:0], wd, 'f', 2, 64))
		fmt.Fprintf(w, `" height="%d" fill="%s" class="%s"/><text x="`, frameHeight-1, colour(raw, i == 0), kind(raw))
		w.Write(strconv.AppendFloat(num[:0], x+3, 'f', 2, 64))
		w.WriteString(`" y="`)
		w.Write(strconv.AppendInt(num[:0], int64(y+frameHeight-4), 10))
		w.WriteString(`">`)
		w.WriteString(escapeText(fitLabel(displayName(raw), wd)))
		w.WriteString("</text></g>\n")
	}
	if standalone {
		w.WriteString("<script type=\"text/ecmascript\"><![CDATA[\n")
		w.WriteString(script)
		w.WriteString("]]></script>\n")
	}
	w.WriteString("</svg>\n")
}

// cspHash is the Content-Security-Policy source expression allowing
// exactly the given inline script or style.
func cspHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}

// WriteSVG writes a self-contained interactive SVG flame graph: frames as
// rectangles with <title> tooltips, and an inline script for click to zoom,
// search (a prompt) and the details line. It opens in any browser.
func WriteSVG(w io.Writer, samples []Sample, opt Options) error {
	s := newScene(samples, opt)
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.WriteString(`<?xml version="1.0" encoding="UTF-8" standalone="no"?>` + "\n")
	s.writeSVG(bw, true)
	return bw.Flush()
}

// WriteHTML writes a self-contained HTML page (inline CSS and script, no
// network access, a Content-Security-Policy that allows only its own
// script and style) holding the interactive flame graph with a search box
// and floating tooltips.
func WriteHTML(w io.Writer, samples []Sample, opt Options) error {
	s := newScene(samples, opt)
	bw := bufio.NewWriterSize(w, 64<<10)
	title := escapeText(displayName(s.opt.Title))
	bw.WriteString("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n")
	fmt.Fprintf(bw, `<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src %s; style-src %s; base-uri 'none'; form-action 'none'">`+"\n",
		cspHash(script), cspHash(style+pageStyle))
	bw.WriteString(`<meta name="viewport" content="width=device-width, initial-scale=1">` + "\n")
	fmt.Fprintf(bw, "<title>%s</title>\n<style>", title)
	bw.WriteString(style + pageStyle)
	bw.WriteString("</style>\n</head>\n<body>\n")
	bw.WriteString(`<div id="fg-bar"><label>Search <input id="fg-search-input" type="search" placeholder="substring, or /regexp/i" autocomplete="off" spellcheck="false"></label></div>` + "\n")
	s.writeSVG(bw, false)
	bw.WriteString(`<div id="fg-tip" role="tooltip"></div>` + "\n<script>")
	bw.WriteString(script)
	bw.WriteString("</script>\n</body>\n</html>\n")
	return bw.Flush()
}

// pageStyle is the part of the stylesheet only the HTML page needs.
const pageStyle = `body { margin: 0; background: #fff; font-family: Verdana, sans-serif; }
#fg-bar { position: sticky; top: 0; z-index: 5; padding: 6px 10px; font-size: 13px; background: #fff; }
#fg-bar input { width: 24em; font-size: 13px; }
#fg-tip { display: none; position: fixed; z-index: 10; max-width: 60em; padding: 4px 6px;
  background: #ffffe8; border: 1px solid #888; font-size: 12px; white-space: pre-wrap;
  overflow-wrap: anywhere; pointer-events: none; box-shadow: 2px 2px 4px rgba(0,0,0,0.2); }
`
