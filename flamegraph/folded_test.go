package flamegraph

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/rewindstack/rewind/internal/testutil/fuzzcorpus"
)

func TestParseFolded(t *testing.T) {
	in := "main;work;compute 42\r\n\nmain;operator new(unsigned long) 3\n" +
		"swapper;do_idle [k];cpuidle_enter [k] 7\nlast;frame 1"
	got, err := ParseFolded(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Sample{
		{[]string{"main", "work", "compute"}, 42},
		{[]string{"main", "operator new(unsigned long)"}, 3},
		{[]string{"swapper", "do_idle [k]", "cpuidle_enter [k]"}, 7},
		{[]string{"last", "frame"}, 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

func TestParseFoldedErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"a;b 1\nnocount\n", "line 2 (byte offset 6): no count"},
		{"a;b 1.5\n", "line 1 (byte offset 0): bad count \"1.5\""},
		{"a;b -3\n", "negative count"},
		{" 4\n", "empty stack"},
		{"a 99999999999999999999\n", "bad count"},
	} {
		_, err := ParseFolded(strings.NewReader(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseFolded(%q) error %v, want %q", c.in, err, c.want)
		}
	}
	_, err := ParseFolded(iotest.TimeoutReader(strings.NewReader(strings.Repeat("a;", 40000) + " 1\n")))
	if !errors.Is(err, iotest.ErrTimeout) {
		t.Errorf("read error not passed on: %v", err)
	}
	_, err = ParseFolded(io.MultiReader(strings.NewReader("x"), bytes.NewReader(bytes.Repeat([]byte("y"), maxFoldedLine+1))))
	if !errors.Is(err, errLineTooLong) {
		t.Errorf("overlong line: %v", err)
	}
}

// foldedSeeds cover the parser's paths: good lines, blank and CRLF lines,
// spaces in frames, bad counts.
var foldedSeeds = map[string]string{
	"basic":    "main;work;compute 42\nmain;io 3\n",
	"crlf":     "a;b 1\r\n\r\nc 2\r\n",
	"spaces":   "main;operator new(unsigned long) 3\nswapper;do_idle [k] 7",
	"bad":      "a;b x\n",
	"hostile":  "</script>;<svg onload=x>;]]> 5\n\xff\xfe;\x00 1\n",
	"trailing": "a;;b; 4\n;; 1\n",
}

// TestWriteFuzzCorpus regenerates testdata/fuzz from the seeds when
// REWIND_WRITE_CORPUS=1.
func TestWriteFuzzCorpus(t *testing.T) {
	parse, render := fuzzcorpus.Regenerate(t, "FuzzParseFolded"), fuzzcorpus.Regenerate(t, "FuzzRender")
	for name, s := range foldedSeeds {
		parse("seed-"+name, []byte(s))
		render("seed-"+name, []byte(s))
	}
}

// FuzzParseFolded checks the reader never panics, errors name a line, and
// what it accepts round-trips through the folded format.
func FuzzParseFolded(f *testing.F) {
	for _, s := range foldedSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		samples, err := ParseFolded(bytes.NewReader(data))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "folded: line ") {
				t.Fatalf("error without a line: %v", err)
			}
			return
		}
		var b strings.Builder
		for _, s := range samples {
			if s.Value < 0 || len(s.Stack) == 0 {
				t.Fatalf("bad sample %+v", s)
			}
			b.WriteString(strings.Join(s.Stack, ";"))
			b.WriteString(" ")
			b.WriteString(strconv.FormatInt(s.Value, 10))
			b.WriteString("\n")
		}
		again, err := ParseFolded(strings.NewReader(b.String()))
		if err != nil {
			t.Fatalf("re-reading %q: %v", b.String(), err)
		}
		if !reflect.DeepEqual(samples, again) && !(len(samples) == 0 && len(again) == 0) {
			t.Fatalf("round trip changed samples:\n%+v\n%+v", samples, again)
		}
	})
}

// FuzzRender feeds arbitrary names and counts to both writers: they must
// not panic, the SVG must be well-formed XML with a single script, and the
// HTML must hold a single script element.
func FuzzRender(f *testing.F) {
	for _, s := range foldedSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var samples []Sample
		for i, line := range bytes.Split(data, []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			samples = append(samples, Sample{Stack: strings.Split(string(line), ";"), Value: int64(1 + i%5)})
		}
		var svg, page bytes.Buffer
		if err := WriteSVG(&svg, samples, Options{Title: string(data)}); err != nil {
			t.Fatal(err)
		}
		_, elems := xmlTitles(t, svg.Bytes())
		if elems["script"] != 1 || elems["svg"] != 1 {
			t.Fatalf("elements %v", elems)
		}
		if err := WriteHTML(&page, samples, Options{Subtitle: string(data)}); err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(bytes.ToLower(page.Bytes()), []byte("<script")); n != 1 {
			t.Fatalf("%d script tags", n)
		}
	})
}
