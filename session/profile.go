package session

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/internal/cachefile"
	"github.com/rewindstack/rewind/internal/textesc"
	"github.com/rewindstack/rewind/profiles"
	"github.com/rewindstack/rewind/runtimes"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/unwind"
)

// ProfileOptions says how the samples of a recording (Record) or of a
// perf.data file (Report) become a profile, and where it goes.
type ProfileOptions struct {
	// Method names the unwinder that makes the stacks (unwind.ByName:
	// auto, dwarf, sframe, fp, gopclntab); MaxDepth bounds each walk.
	// Methods, when set, are the unwinders instead (see Methods).
	Method   string
	MaxDepth int
	Methods  []profiles.Method
	// Fidelity also walks the samples with the other methods, for the
	// fidelity table: each on every k-th sample when there are more than
	// FidelitySamples (0: every sample).
	Fidelity        bool
	FidelitySamples int
	// CacheDir is the persistent caches' directory (unwind tables,
	// symbols, kernel symbols); "" uses none.
	CacheDir string
	// FindDebug, when set, finds an object's separate debug file.
	FindDebug func(*elfobj.File) *elfobj.File
	// Output is where the profile is written (a nil Names: the default
	// names of the time of the write, DefaultNames); Title is the flame
	// graph's title.
	Output Output
	Title  string
	// Recheck, when set, is called just before the write, whose error
	// stops it: the output checked again (a link or FIFO put at its
	// path during the recording is refused).
	Recheck func() error
	// Quiet leaves the fidelity table out; Stats adds what the caches did
	// (rebuilt or unsaved entries) and a recording's Go assist.
	Quiet, Stats bool
	// Log receives the fidelity table and what the run has to say (nil:
	// nothing), Warn the problems that do not stop it (nil: none).
	Log  io.Writer
	Warn func(string)
	// Phase, when set, is told when a phase of the run ends ("read",
	// "unwind+symbolize"), and Note given a line about it (--stats).
	Phase func(name string)
	Note  func(string)
}

// finish is what a run adds, at its end, to its profile's build.
type finish struct {
	periodNS int64
	// offCPU and copyEdgeHint go to the profile (profiles.Profile).
	offCPU       bool
	copyEdgeHint string
	// unwound, when set, is called once the profile no longer needs
	// the samples' stack copies; built once it is built, before the
	// fidelity table.
	unwound, built func()
	// noInterpFrames, when set, says how to get the Python frames this
	// profile cannot have (stack copies unwound in user space).
	noInterpFrames string
	// interpReads, when set, says how the recording read the
	// interpreters' frames after each sample (profiles.Profile.InterpReads).
	interpReads func() []runtimes.SampleStats
	// inputErr is why the input could not be read to its end: the
	// profile of the records before it is written, if it has samples.
	inputErr error
}

// Methods returns the unwinders of a profile: method first (it makes the
// stacks), then the others of the fidelity table, each walking at most
// maxDepth frames.
func Methods(method string, maxDepth int) ([]profiles.Method, error) {
	var out []profiles.Method
	for _, name := range []string{method, "auto", "dwarf", "sframe", "fp"} {
		dup := false
		for _, m := range out {
			dup = dup || m.Name == name
		}
		if dup {
			continue
		}
		u, err := unwind.ByName(name)
		if err != nil {
			return nil, fmt.Errorf("unknown --method %q (want auto, dwarf, fp, sframe or gopclntab)", name)
		}
		u.MaxDepth = maxDepth
		out = append(out, profiles.Method{Name: name, Unwinder: u})
	}
	return out, nil
}

// methods returns the run's unwinders.
func (o *ProfileOptions) methods() ([]profiles.Method, error) {
	if o.Methods != nil {
		return o.Methods, nil
	}
	return Methods(o.Method, o.MaxDepth)
}

func (o *ProfileOptions) warn(msg string) {
	if o.Warn != nil {
		o.Warn(msg)
	}
}

func (o *ProfileOptions) log() io.Writer {
	if o.Log == nil {
		return io.Discard
	}
	return o.Log
}

func (o *ProfileOptions) phase(name string) {
	if o.Phase != nil {
		o.Phase(name)
	}
}

// symbolizer returns the symbolizer of a run.
func (o *ProfileOptions) symbolizer() *symbolize.Symbolizer {
	sym := &symbolize.Symbolizer{Inlines: true, FindDebug: o.FindDebug}
	if o.CacheDir != "" {
		sym.Cache = symbolize.NewPersistentCache(o.CacheDir)
	}
	return sym
}

// builder returns the profile builder of col, naming frames with sym.
func (o *ProfileOptions) builder(col *profiles.Collector, methods []profiles.Method, sym *symbolize.Symbolizer) *profiles.Builder {
	if o.CacheDir != "" {
		col.Objects.Tables.Dir = o.CacheDir
	}
	kernel := func() *symbolize.Kallsyms {
		ks, err := symbolize.LoadKallsymsCached(o.CacheDir)
		if err != nil {
			o.warn(fmt.Sprintf("kernel frames are not named: %v", err))
		}
		return ks
	}
	if !o.Fidelity {
		methods = methods[:1]
	}
	// Folded: a long recording (or a decompression bomb) keeps its
	// distinct stacks, not every sample.
	return profiles.NewBuilder(col, profiles.Options{Methods: methods, Kernel: kernel, Symbolizer: sym, FidelitySamples: max(0, o.FidelitySamples), Fold: true})
}

// finish unwinds and symbolizes the samples still in the collector,
// prints the fidelity table and writes the profile.
func (o *ProfileOptions) finish(b *profiles.Builder, col *profiles.Collector, f finish) error {
	b.Add(col.Samples())
	prof := b.Profile()
	b.Release()
	if f.unwound != nil {
		f.unwound()
	}
	prof.OffCPU = f.offCPU
	prof.CopyEdgeHint = f.copyEdgeHint
	if f.built != nil {
		f.built()
	}
	if f.interpReads != nil {
		prof.InterpReads = f.interpReads()
	}
	if f.noInterpFrames != "" {
		if note := missingPythonNote(prof, f.noInterpFrames, f.interpReads != nil); note != "" {
			o.warn(note)
		}
	}
	if f.inputErr != nil {
		if len(prof.Stacks) == 0 {
			return fmt.Errorf("%w (no sample before it: no profile written)", f.inputErr)
		}
		o.warn(fmt.Sprintf("%v; writing the profile of the records before it", f.inputErr))
	}
	o.phase("unwind+symbolize")
	if !o.Quiet {
		prof.WriteFidelity(o.log())
	}
	if len(prof.Stacks) == 0 {
		o.warn("no samples were recorded")
	}
	return o.write(prof, profiles.WriteOptions{PeriodNS: f.periodNS, Title: o.Title})
}

// write writes a built profile to Output and says where it went.
func (o *ProfileOptions) write(prof *profiles.Profile, opt profiles.WriteOptions) error {
	if o.Recheck != nil {
		if err := o.Recheck(); err != nil {
			return err
		}
	}
	out := o.Output
	if out.Names == nil {
		// The default name is claimed when the profile is written:
		// another run may have taken the one free when it started.
		out.Names = DefaultNames(time.Now())
	}
	path, err := WriteProfile(prof, out, opt)
	switch {
	case err != nil:
		return err
	case path == os.DevNull:
		fmt.Fprintf(o.log(), "rewind: discarded the profile (-o %s, %d samples)\n", path, prof.Samples())
		return nil
	case path == "-":
		fmt.Fprintf(o.log(), "rewind: wrote the profile to standard output (%d samples)\n", prof.Samples())
		return nil
	}
	CacheNotes(o.Stats, o.Warn, o.Log)
	fmt.Fprintf(o.log(), "rewind: wrote %s (%d samples)\n", path, prof.Samples())
	return nil
}

// CacheNotes says what the persistent caches did (cachefile.TakeNotes):
// the files or directories refused always, to warn; with stats the
// entries rebuilt (corrupt, mismatched) or not saved, to log.
func CacheNotes(stats bool, warn func(string), log io.Writer) {
	untrusted, other := cachefile.TakeNotes()
	for _, n := range untrusted {
		if warn != nil {
			warn(n)
		}
	}
	if stats && log != nil {
		for _, n := range other {
			fmt.Fprintf(log, "rewind: %s\n", textesc.String(n))
		}
	}
}

// missingPythonNote says, in one line, that a profile of samples in
// CPython's evaluation loop has none of the Python functions it ran, and
// how to get them; "" when there is nothing to say.
func missingPythonNote(prof *profiles.Profile, how string, sampled bool) string {
	var total, eval int64
	for i := range prof.Stacks {
		st := &prof.Stacks[i]
		n := st.Samples()
		total += n
		inEval := false
		for _, l := range st.Locations {
			fn := l.Lines[len(l.Lines)-1]
			if fn.Module == "[python]" {
				return "" // the profile has Python frames
			}
			inEval = inEval || fn.Function == "_PyEval_EvalFrameDefault"
		}
		if inEval {
			eval += n
		}
	}
	if eval == 0 {
		return ""
	}
	if sampled {
		return fmt.Sprintf("no Python frames: %.0f%% of the samples run CPython's evaluation loop (_PyEval_EvalFrameDefault), "+
			"and none of its Python frames could be read from the process after them (the warnings say why): %s", 100*float64(eval)/float64(total), how)
	}
	return fmt.Sprintf("no Python frames: %.0f%% of the samples run CPython's evaluation loop (_PyEval_EvalFrameDefault), "+
		"whose Python functions are read only by the walk in the kernel: %s", 100*float64(eval)/float64(total), how)
}
