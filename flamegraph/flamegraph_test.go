package flamegraph

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"unicode/utf8"
)

// hostileNames are frame names meant to break out of every context the
// output has: HTML text, SVG/XML text and CDATA, attributes, scripts.
var hostileNames = []string{
	"</script><script>window.pwned=1</script>",
	"<svg onload=window.pwned=1>",
	`<img src=x onerror="window.pwned=1">`,
	`"'><iframe src=javascript:window.pwned=1>`,
	"]]><script>window.pwned=1</script><![CDATA[",
	"&amp; &lt;not-an-entity&gt; &#x3c;",
	"<!-- comment -->",
	"a\x00b\x01c\x1fd\x7fe",
	"bad utf8 \xff\xfe\xc3\x28 \xed\xa0\x80 end",
	"\u202eevil override\u202c",
	"non-char \uFFFE \uFFFF",
	"line\nbreak\r\ttab",
	"операция::исполнить<T>() 日本語 😀",
	strings.Repeat("verylong::", 5000),
	"zeta [k]",
	"[unknown]",
}

// xmlTitles parses an SVG document with Go's strict XML decoder and returns
// the text of every <title> and the count of each element name.
func xmlTitles(t testing.TB, doc []byte) ([]string, map[string]int) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	d.Strict = true
	var titles []string
	elems := map[string]int{}
	var in bool
	var cur strings.Builder
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			elems[tok.Name.Local]++
			for _, a := range tok.Attr {
				if strings.HasPrefix(strings.ToLower(a.Name.Local), "on") {
					t.Errorf("event handler attribute %q on <%s>", a.Name.Local, tok.Name.Local)
				}
			}
			if tok.Name.Local == "title" {
				in = true
				cur.Reset()
			}
		case xml.CharData:
			if in {
				cur.Write(tok)
			}
		case xml.EndElement:
			if tok.Name.Local == "title" {
				in = false
				titles = append(titles, cur.String())
			}
		}
	}
	return titles, elems
}

func hostileSamples() []Sample {
	var s []Sample
	for i, n := range hostileNames {
		s = append(s, Sample{Stack: []string{"main", n}, Value: int64(10 + i)})
		s = append(s, Sample{Stack: []string{n, n, "leaf"}, Value: 7})
	}
	return s
}

// TestHostileNamesSVG checks, with Go's XML parser, that hostile names
// leave the SVG well-formed, add no element or handler, and come back as
// the same text (or its \xNN-escaped display form).
func TestHostileNamesSVG(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteSVG(&buf, hostileSamples(), Options{Title: "</title><script>x</script>", Subtitle: hostileNames[0], Unit: "<u>"}); err != nil {
		t.Fatal(err)
	}
	titles, elems := xmlTitles(t, buf.Bytes())
	if elems["script"] != 1 {
		t.Errorf("%d <script> elements, want 1", elems["script"])
	}
	for name := range elems {
		switch name {
		case "svg", "style", "rect", "text", "tspan", "g", "title", "script":
		default:
			t.Errorf("unexpected element <%s> in the output", name)
		}
	}
	got := map[string]bool{}
	for _, ti := range titles {
		if i := strings.LastIndexByte(ti, '\n'); i >= 0 {
			got[ti[:i]] = true
		}
	}
	for _, n := range hostileNames {
		want := displayName(n)
		if !got[want] {
			t.Errorf("no frame titled %q", want)
		}
		if utf8.ValidString(n) && len(n) <= maxNameBytes && !strings.ContainsAny(n, "\x00\x01\x1f\x7f\n\r\t\u202e\u202c\uFFFE\uFFFF") && want != n {
			t.Errorf("printable name %q displayed as %q", n, want)
		}
	}
}

// TestHostileNamesHTML checks that the HTML page contains exactly the one
// script and no markup from names (the browser test checks the DOM too).
func TestHostileNamesHTML(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteHTML(&buf, hostileSamples(), Options{Title: "</title><script>x</script>"}); err != nil {
		t.Fatal(err)
	}
	page := strings.ToLower(buf.String())
	for tag, want := range map[string]int{"<script": 1, "</script": 1, "<svg": 1, "<img": 0, "<iframe": 0, "<!--": 0, "<style": 1, "<meta": 3} {
		if n := strings.Count(page, tag); n != want {
			t.Errorf("%d occurrences of %q, want %d", n, tag, want)
		}
	}
	if !utf8.Valid(buf.Bytes()) {
		t.Error("HTML is not valid UTF-8")
	}
	if !strings.Contains(buf.String(), "Content-Security-Policy") {
		t.Error("no Content-Security-Policy")
	}
}

// TestScriptIsInert checks the static script and style can sit inside
// both an HTML <script> and an XML CDATA section unchanged.
func TestScriptIsInert(t *testing.T) {
	for name, s := range map[string]string{"script.js": script, "style.css": style + pageStyle} {
		for _, bad := range []string{"</", "]]>", "<!--"} {
			if strings.Contains(s, bad) {
				t.Errorf("%s contains %q", name, bad)
			}
		}
	}
}

func TestDisplayName(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"main", "main"},
		{"a\x00b", `a\x00b`},
		{"\xff", `\xff`},
		{"é\xc3", `é\xc3`},
		{"\u202e", `\u202E`},
		{"x\u0085y", `x\x85y`},
		{"\uFFFF", `\uFFFF`},
		{"tab\there", `tab\x09here`},
	} {
		if got := displayName(c.in); got != c.want {
			t.Errorf("displayName(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	long := displayName(strings.Repeat("é", 5000))
	if !utf8.ValidString(long) || len(long) > maxNameBytes+40 || !strings.HasSuffix(long, "more bytes]") {
		t.Errorf("long name cut badly: %d bytes, ends %q", len(long), long[len(long)-20:])
	}
}

// TestLayout checks merging of identical prefixes, alphabetical order per
// level, offsets and values against a hand-computed expectation.
func TestLayout(t *testing.T) {
	tr := buildTree([]Sample{
		{[]string{"main", "b", "x"}, 3},
		{[]string{"main", "a"}, 2},
		{[]string{"main", "b", "x"}, 1},
		{[]string{"main", "b"}, 4},
		{[]string{"other"}, 5},
		{[]string{"main"}, 0},  // ignored
		{[]string{"main"}, -9}, // ignored
		{nil, 1},               // root only
	})
	l := tr.place(0)
	var got []string
	for _, f := range l.frames {
		got = append(got, fmt.Sprintf("%s@%d+%d/%d", tr.names[f.node], f.offset, f.value, f.depth))
	}
	want := "all@0+16/0 main@0+10/1 a@0+2/2 b@2+8/2 x@2+4/3 other@10+5/1"
	if strings.Join(got, " ") != want {
		t.Errorf("layout\n got %s\nwant %s", strings.Join(got, " "), want)
	}
}

// TestPrune checks that frames under the pixel threshold are dropped with
// their subtrees and that the graph says so.
func TestPrune(t *testing.T) {
	samples := []Sample{{[]string{"big", "child"}, 1_000_000}}
	for i := 0; i < 1000; i++ {
		samples = append(samples, Sample{[]string{"big", fmt.Sprintf("tiny%04d", i), "leaf"}, 1})
	}
	s := newScene(samples, Options{})
	// 1 sample of 1,001,000 is 0.0012 px wide in 1180 px: below 0.1 px.
	if got := len(s.l.frames); got != 3 {
		t.Errorf("%d frames drawn, want 3 (all, big, child)", got)
	}
	if s.l.prunedFrames != 2000 || s.l.prunedValue != 1000 {
		t.Errorf("pruned %d frames / %d, want 2000 / 1000", s.l.prunedFrames, s.l.prunedValue)
	}
	if !strings.Contains(s.info(), "2,000 frames narrower than 0.1 px not drawn (stack tails of 1,000 samples, 0.10%)") {
		t.Errorf("info does not report pruning: %q", s.info())
	}
}

// TestSaturation checks that huge counts neither overflow nor panic.
func TestSaturation(t *testing.T) {
	var buf bytes.Buffer
	s := []Sample{{[]string{"a"}, math.MaxInt64}, {[]string{"a", "b"}, math.MaxInt64}, {[]string{"c"}, 1}}
	if err := WriteSVG(&buf, s, Options{}); err != nil {
		t.Fatal(err)
	}
	xmlTitles(t, buf.Bytes())
	if err := WriteHTML(io.Discard, nil, Options{}); err != nil {
		t.Fatal(err)
	}
}

func TestColourStable(t *testing.T) {
	if colour("foo", false) != colour("foo", false) || colour("foo", false) == colour("bar", false) {
		t.Error("colours are not a function of the name")
	}
	if kind("do_syscall_64 [k]") != "k" || kind("[unknown]") != "u" || kind("main") != "c" {
		t.Error("frame kinds misclassified")
	}
}

// manyStacks builds n samples spread over distinct stacks, for the scale
// test and the benchmarks.
func manyStacks(samples, distinct int) []Sample {
	out := make([]Sample, 0, samples)
	names := make([]string, 2000)
	for i := range names {
		names[i] = fmt.Sprintf("pkg%d.function_%d", i%37, i)
	}
	x := uint64(88172645463325252)
	next := func() uint64 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x }
	stacks := make([][]string, distinct)
	for i := range stacks {
		depth := 5 + int(next()%30)
		st := []string{"_start", "__libc_start_main", "main"}
		for d := 0; d < depth; d++ {
			// Skewed choice so that prefixes are shared like real code.
			k := int(next()%uint64(4+d*d)) % len(names)
			st = append(st, names[k])
		}
		stacks[i] = st
	}
	for i := 0; i < samples; i++ {
		// Zipf-like: low-numbered stacks are hot.
		r := next() % uint64(distinct)
		r = r * r / uint64(distinct)
		out = append(out, Sample{Stack: stacks[r], Value: 1})
	}
	return out
}

// TestScale renders 10^5 distinct stacks and bounds the page size.
func TestScale(t *testing.T) {
	n := 200_000
	if testing.Short() {
		n = 20_000
	}
	samples := manyStacks(n, 100_000)
	var buf bytes.Buffer
	if err := WriteHTML(&buf, samples, Options{Title: "scale"}); err != nil {
		t.Fatal(err)
	}
	if buf.Len() > 20<<20 {
		t.Errorf("page is %d bytes", buf.Len())
	}
	t.Logf("%d samples, 100000 distinct stacks: %d bytes of HTML", n, buf.Len())
}

func BenchmarkWriteHTML(b *testing.B) {
	samples := manyStacks(1_000_000, 100_000)
	b.ResetTimer()
	var size int
	for b.Loop() {
		var buf bytes.Buffer
		if err := WriteHTML(&buf, samples, Options{}); err != nil {
			b.Fatal(err)
		}
		size = buf.Len()
	}
	b.ReportMetric(float64(size), "bytes/page")
}

func BenchmarkWriteSVG(b *testing.B) {
	samples := manyStacks(1_000_000, 100_000)
	b.ResetTimer()
	var size int
	for b.Loop() {
		var buf bytes.Buffer
		if err := WriteSVG(&buf, samples, Options{}); err != nil {
			b.Fatal(err)
		}
		size = buf.Len()
	}
	b.ReportMetric(float64(size), "bytes/doc")
}

// BenchmarkBuildTree isolates merging of the stacks from writing.
func BenchmarkBuildTree(b *testing.B) {
	samples := manyStacks(1_000_000, 100_000)
	b.ResetTimer()
	for b.Loop() {
		buildTree(samples)
	}
}

// BenchmarkWriteHTMLCopiedStacks is BenchmarkWriteHTML with every sample
// owning its own copy of its stack, so identical stacks cannot be merged
// by slice identity before the walk.
func BenchmarkWriteHTMLCopiedStacks(b *testing.B) {
	samples := manyStacks(1_000_000, 100_000)
	for i := range samples {
		samples[i].Stack = append([]string(nil), samples[i].Stack...)
	}
	b.ResetTimer()
	for b.Loop() {
		if err := WriteHTML(io.Discard, samples, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestManyDistinctNames renders 10^5 distinct frame names (each its own
// stack) and one very deep stack: bounded output, no panic, well-formed.
func TestManyDistinctNames(t *testing.T) {
	var samples []Sample
	for i := 0; i < 100_000; i++ {
		samples = append(samples, Sample{Stack: []string{"main", fmt.Sprintf("fn_%d<%d>", i, i)}, Value: int64(1 + i%7)})
	}
	deep := make([]string, 50_000)
	for i := range deep {
		deep[i] = fmt.Sprintf("rec%d", i%3)
	}
	samples = append(samples, Sample{Stack: deep, Value: 400_000})
	var buf bytes.Buffer
	if err := WriteSVG(&buf, samples, Options{}); err != nil {
		t.Fatal(err)
	}
	_, elems := xmlTitles(t, buf.Bytes())
	s := newScene(samples, Options{})
	t.Logf("%d bytes, %d frames drawn, %d pruned", buf.Len(), elems["g"], s.l.prunedFrames)
	if elems["g"] != 1+50_000+1 || s.l.prunedFrames != 100_000 {
		t.Errorf("drew %d frames and pruned %d; want the deep stack (50001 with the root), main, and 10^5 pruned", elems["g"], s.l.prunedFrames)
	}
}
