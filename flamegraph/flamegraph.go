// Package flamegraph renders profiles as interactive flame graphs: a
// self-contained HTML page or SVG document (inline style and script, no
// network) with click to zoom, search with the matched share, and
// tooltips giving name, value and percentage.
//
// Identical stack prefixes are merged; frames are sorted alphabetically
// per level, as flamegraph.pl does, with the root at the bottom. Colours
// are stable per function name (a hash picks the shade) and tell user
// code (warm), kernel frames (names ending in "[k]", aqua) and
// "[unknown]" frames (grey) apart. Frames narrower than MinWidthPx (0.1 px
// by default, as in flamegraph.pl) are not drawn, and the graph says how
// many were dropped.
//
// A graph taller than the window (deep stacks, such as Python's) opens
// scrolled to its bottom, where the root and the widest frames are, and
// zooming (a click, a #zoom= link, Esc or Reset Zoom) scrolls the zoomed
// frame into view with as much as fits of what it called; the HTML page
// keeps its search box at the top of the window. The standalone SVG does
// the same from its own script.
//
// Frame names are untrusted input. They are written only as escaped text
// (never inside a script), invalid UTF-8 and control characters are shown
// as \xNN, and the HTML page carries a Content-Security-Policy that lets
// only its own script run. ParseFolded reads Brendan Gregg's folded-stack
// format, so any folded file (from perf, stackcollapse-*.pl, rewind) can be
// rendered.
package flamegraph

// Sample is one stack with its weight; Stack[0] is the root (outermost)
// frame, the last is the leaf. Samples with a non-positive Value are
// ignored.
type Sample struct {
	Stack []string
	Value int64
}

// Options controls the text around the graph and its geometry.
type Options struct {
	// Title is shown at the top (default "Flame Graph").
	Title string
	// Unit names the value, e.g. "samples" (the default).
	Unit string
	// Subtitle is a line under the title, e.g.
	// "rewind record -F 99, 12.3 s, 99.4% complete stacks".
	Subtitle string
	// Width is the drawing width in pixels (default 1200).
	Width int
	// MinWidthPx drops frames narrower than this many pixels at full
	// view (default 0.1, flamegraph.pl's --minwidth).
	MinWidthPx float64
}
