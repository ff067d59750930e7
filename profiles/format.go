package profiles

import (
	"fmt"
	"io"
	"strings"

	"github.com/rewindstack/rewind/flamegraph"
	"github.com/rewindstack/rewind/internal/outfile"
)

// WriteOptions are what the output formats need besides the profile.
type WriteOptions struct {
	// PeriodNS is the sampling period in nanoseconds (pprof).
	PeriodNS int64
	// Title heads flame graphs.
	Title string
}

// format is one output format, chosen by the file name's extension.
type format struct {
	ext   string
	write func(w io.Writer, p *Profile, opt WriteOptions) error
}

// formats is the one registry of output formats by extension.
var formats = []format{
	{".pb.gz", func(w io.Writer, p *Profile, opt WriteOptions) error { return p.WritePprof(w, opt.PeriodNS) }},
	{".folded", func(w io.Writer, p *Profile, _ WriteOptions) error { return p.WriteFolded(w) }},
	{".html", func(w io.Writer, p *Profile, opt WriteOptions) error { return p.writeFlame(w, false, opt.Title) }},
	{".svg", func(w io.Writer, p *Profile, opt WriteOptions) error { return p.writeFlame(w, true, opt.Title) }},
}

func formatOf(path string) (*format, error) {
	for i := range formats {
		if strings.HasSuffix(path, formats[i].ext) {
			return &formats[i], nil
		}
	}
	var exts []string
	for _, f := range formats {
		exts = append(exts, f.ext)
	}
	return nil, fmt.Errorf("-o %s: unknown format; use %s", path, strings.Join(exts, ", "))
}

// CheckOutput reports whether path names a known output format (by its
// extension: .pb.gz, .folded, .html, .svg).
func CheckOutput(path string) error {
	_, err := formatOf(path)
	return err
}

// WriteFile writes the profile to path in the format its extension names,
// with outfile: under a temporary name renamed onto path, so a failed
// write leaves any old file as it was; a path that is not a regular file
// (a symbolic link, FIFO, device) is refused; a replaced file keeps its
// owner and mode.
func (p *Profile) WriteFile(path string, opt WriteOptions) error {
	f, err := formatOf(path)
	if err != nil {
		return err
	}
	return outfile.Write(path, 0o666, func(w io.Writer) error { return f.write(w, p, opt) })
}

// WriteNewFile writes the profile to a new file, the first of name(1),
// name(2), ... that no file has, claimed atomically (a concurrent run
// choosing the same names never replaces it), and returns its name. The
// format is the one name(1)'s extension names.
func (p *Profile) WriteNewFile(name func(i int) string, opt WriteOptions) (string, error) {
	f, err := formatOf(name(1))
	if err != nil {
		return "", err
	}
	return outfile.WriteUnique(name, 0o666, func(w io.Writer) error { return f.write(w, p, opt) })
}

// writeFlame writes an HTML or SVG flame graph, one box per frame
// (inlined calls too), kernel frames suffixed "_[k]".
func (p *Profile) writeFlame(w io.Writer, svg bool, title string) error {
	folded := p.Fold(FoldOptions{KernelSuffix: "_[k]", Count: !p.OffCPU})
	samples := make([]flamegraph.Sample, len(folded))
	for i, s := range folded {
		samples[i] = flamegraph.Sample{Stack: s.Stack, Value: s.Value}
	}
	opt := flamegraph.Options{Title: title, Unit: "samples", Subtitle: p.flameSubtitle()}
	if p.OffCPU {
		opt.Unit = "ns off CPU" // weighted by the time blocked
	}
	if svg {
		return flamegraph.WriteSVG(w, samples, opt)
	}
	return flamegraph.WriteHTML(w, samples, opt)
}

// flameSubtitle summarizes the profile's size and stack fidelity.
func (p *Profile) flameSubtitle() string {
	s := fmt.Sprintf("%d samples", p.Samples())
	if p.Lost > 0 {
		s += fmt.Sprintf(", %d lost", p.Lost)
	}
	if len(p.Fidelity) > 0 && p.Fidelity[0].Samples > 0 {
		f := p.Fidelity[0]
		s += fmt.Sprintf(", %.1f%% complete stacks (--method %s)", f.Percent(), f.Method)
	}
	return s
}
