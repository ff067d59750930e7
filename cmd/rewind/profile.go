package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/rewindstack/rewind/internal/outfile"
	"github.com/rewindstack/rewind/profiles"
	"github.com/rewindstack/rewind/session"
	"github.com/rewindstack/rewind/symbolize"
)

// profileMethods returns the unwinders of a profile: the chosen method
// first (it makes the stacks), then the others for the fidelity table.
func profileMethods(method string, maxDepth int) ([]profiles.Method, error) {
	var out []profiles.Method
	for _, name := range []string{method, "auto", "dwarf", "sframe", "fp"} {
		dup := false
		for _, m := range out {
			dup = dup || m.Name == name
		}
		if dup {
			continue
		}
		u, err := unwinderFor(name, maxDepth)
		if err != nil {
			return nil, err
		}
		out = append(out, profiles.Method{Name: name, Unwinder: u})
	}
	return out, nil
}

// newBuilder returns the profile builder of a record or report run.
func newBuilder(col *profiles.Collector, methods []profiles.Method, pf *profileFlags) *profiles.Builder {
	sym, dir := profileSymbolizer(pf)
	return newBuilderWith(col, methods, pf, sym, dir)
}

// profileSymbolizer returns the symbolizer of a record or report run and
// the cache directory ("" when there is none).
func profileSymbolizer(pf *profileFlags) (*symbolize.Symbolizer, string) {
	dir := cacheDir(*pf.noCache)
	sym := &symbolize.Symbolizer{Inlines: true, FindDebug: pf.findDebug}
	if dir != "" {
		sym.Cache = symbolize.NewPersistentCache(dir)
	}
	return sym, dir
}

// newBuilderWith is newBuilder with the symbolizer and cache directory
// profileSymbolizer returned.
func newBuilderWith(col *profiles.Collector, methods []profiles.Method, pf *profileFlags, sym *symbolize.Symbolizer, dir string) *profiles.Builder {
	if dir != "" {
		col.Objects.Tables.Dir = dir
	}
	kernel := func() *symbolize.Kallsyms {
		ks, err := symbolize.LoadKallsymsCached(dir)
		if err != nil {
			warn(fmt.Sprintf("kernel frames are not named: %v", err))
		}
		return ks
	}
	if !*pf.fidelity {
		methods = methods[:1]
	}
	// Folded: a long recording (or a decompression bomb) keeps its
	// distinct stacks, not every sample.
	return profiles.NewBuilder(col, profiles.Options{Methods: methods, Kernel: kernel, Symbolizer: sym, FidelitySamples: max(0, *pf.fidN), Fold: true})
}

// finishProfile unwinds and symbolizes the samples still in the
// collector, prints the fidelity table and writes the output file.
// unwound (may be nil) is called once the profile no longer needs the
// samples' stack copies, before the output is written.
func finishProfile(b *profiles.Builder, col *profiles.Collector, pf *profileFlags, periodNS int64, title string, unwound func()) error {
	b.Add(col.Samples())
	prof := b.Profile()
	b.Release()
	if unwound != nil {
		unwound()
	}
	prof.OffCPU = pf.offCPU
	prof.CopyEdgeHint = pf.copyEdgeHint
	if pf.afterBuild != nil {
		pf.afterBuild()
	}
	if pf.noInterpFrames != "" {
		if note := missingPythonNote(prof, pf.noInterpFrames); note != "" {
			warn(note)
		}
	}
	if pf.inputErr != nil {
		if len(prof.Stacks) == 0 {
			return fmt.Errorf("%w (no sample before it: no profile written)", pf.inputErr)
		}
		warn(fmt.Sprintf("%v; writing the profile of the records before it", pf.inputErr))
	}
	pf.tm.mark("unwind+symbolize")
	if !*pf.quiet {
		prof.WriteFidelity(os.Stderr)
	}
	if len(prof.Stacks) == 0 {
		warn("no samples were recorded")
	}
	out, err := outputPath(*pf.out, *pf.format)
	if err != nil {
		return err
	}
	// The default name is claimed when the profile is written: another
	// run may have taken the one outputPath found free.
	opt := profiles.WriteOptions{PeriodNS: periodNS, Title: title}
	names := session.DefaultNames(time.Now())
	return writeFinished(prof, pf, out, names, opt)
}

// writeFinished writes a built profile to out (-o, or the default name
// from names; see session.WriteProfile) and says where it went.
func writeFinished(prof *profiles.Profile, pf *profileFlags, out string, names func(int) string, opt profiles.WriteOptions) error {
	if *pf.out == "" {
		out = "" // a new file, by names
	}
	path, err := session.WriteProfile(prof, session.Output{Path: out, Format: *pf.format, Names: names}, opt)
	switch {
	case err != nil:
		return err
	case path == os.DevNull:
		fmt.Fprintf(os.Stderr, "rewind: discarded the profile (-o %s, %d samples)\n", path, prof.Samples())
		return nil
	case path == "-":
		fmt.Fprintf(os.Stderr, "rewind: wrote the profile to standard output (%d samples)\n", prof.Samples())
		return nil
	}
	printCacheNotes(*pf.stats)
	fmt.Fprintf(os.Stderr, "rewind: wrote %s (%d samples)\n", path, prof.Samples())
	return nil
}

// outputPath returns the -o path, or the default name, and checks its
// format, and that it is not something rewind refuses to replace (a
// symbolic link, FIFO or device), before any work is done.
//
// The default name, rewind-TIME.html in the current directory, is one no
// file has: a second profile written within the same second (a script
// reporting several perf.data files) is rewind-TIME-2.html rather than
// a replacement of the first. The name returned is the one free now;
// finishProfile claims the first free one atomically when it writes
// (concurrent runs lost profiles to a check then rename). Writing under a
// new name is also cheaper: renaming onto an existing file makes ext4
// start writing the new one out at once (its auto_da_alloc), which took
// 0.5-1.5 ms.
func outputPath(out, format string) (string, error) {
	switch {
	case out == "-":
		if format == "" {
			return "", usagef("-o - writes the profile to standard output: name its format with --format pprof, folded, html or svg")
		}
		if session.FormatExt(format) == "" {
			return "", usagef("--format %s: unknown; use pprof, folded, html or svg", format)
		}
		return out, nil
	case format != "":
		return "", usagef("--format is for -o - (standard output); a file's extension names its format")
	case out == os.DevNull:
		return out, nil
	}
	if out == "" {
		name := session.DefaultNames(time.Now())
		for i := 1; i < outfile.MaxUnique; i++ {
			if _, err := os.Lstat(name(i)); errors.Is(err, fs.ErrNotExist) {
				return name(i), nil
			}
		}
		return name(outfile.MaxUnique), nil
	}
	if err := profiles.CheckOutput(out); err != nil {
		return "", err
	}
	if err := outfile.Check(out); err != nil {
		return "", fmt.Errorf("-o %w", err)
	}
	return out, nil
}
