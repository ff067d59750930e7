package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rewindstack/rewind/profiles"
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
	dir := cacheDir(*pf.noCache)
	sym := &symbolize.Symbolizer{Inlines: true, FindDebug: pf.findDebug}
	if dir != "" {
		sym.Cache = symbolize.NewPersistentCache(dir)
		col.Objects.Tables.Dir = dir
	}
	kernel := func() *profiles.Kallsyms {
		ks, err := profiles.LoadKallsymsCached(dir)
		if err != nil {
			warn(fmt.Sprintf("kernel frames are not named: %v", err))
		}
		return ks
	}
	if !*pf.fidelity {
		methods = methods[:1]
	}
	return profiles.NewBuilder(col, profiles.Options{Methods: methods, Kernel: kernel, Symbolizer: sym, FidelitySamples: max(0, *pf.fidN)})
}

// finishProfile unwinds and symbolizes the samples still in the
// collector, prints the fidelity table and writes the output file.
func finishProfile(b *profiles.Builder, col *profiles.Collector, pf *profileFlags, periodNS int64, title string) error {
	b.Add(col.Samples())
	prof := b.Profile()
	prof.OffCPU = pf.offCPU
	prof.CopyEdgeHint = pf.copyEdgeHint
	if pf.afterBuild != nil {
		pf.afterBuild()
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
	out, err := outputPath(*pf.out)
	if err != nil {
		return err
	}
	if err := writeProfile(prof, out, periodNS, title); err != nil {
		// Do not lose a recording to an output problem.
		if !strings.HasSuffix(out, ".folded") && len(prof.Stacks) > 0 {
			alt := strings.TrimSuffix(strings.TrimSuffix(out, filepath.Ext(out)), ".pb") + ".folded"
			if ferr := writeProfile(prof, alt, periodNS, title); ferr == nil {
				return fmt.Errorf("%w (the stacks were saved as %s)", err, alt)
			}
		}
		return err
	}
	printCacheNotes(*pf.stats)
	fmt.Fprintf(os.Stderr, "rewind: wrote %s (%d samples)\n", out, len(prof.Stacks))
	return nil
}

// outputPath returns the -o path, or the default name, and checks its
// format before any work is done.
func outputPath(out string) (string, error) {
	if out == "" {
		return "rewind-" + time.Now().Format("20060102-150405") + ".html", nil
	}
	if err := profiles.CheckOutput(out); err != nil {
		return "", err
	}
	return out, nil
}

// writeProfile writes the profile in the format out's extension names.
// The file is written under a temporary name and renamed, so a failed
// write leaves no half file behind.
func writeProfile(prof *profiles.Profile, out string, periodNS int64, title string) error {
	return prof.WriteFile(out, profiles.WriteOptions{PeriodNS: periodNS, Title: title})
}
