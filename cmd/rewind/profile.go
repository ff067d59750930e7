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
)

// options returns the profile options the flags give, with the
// unwinders methods (session.Methods) and the cache directory, which it
// checks (it may warn once). The caller sets the title.
func (pf *profileFlags) options(methods []profiles.Method) session.ProfileOptions {
	return session.ProfileOptions{Method: *pf.method, MaxDepth: *pf.maxDepth, Methods: methods, Fidelity: *pf.fidelity,
		FidelitySamples: *pf.fidN, CacheDir: cacheDir(*pf.noCache), Output: session.Output{Path: *pf.out, Format: *pf.format},
		Quiet: *pf.quiet, Stats: *pf.stats, Log: os.Stderr, Warn: warn,
		Recheck: func() error { _, err := outputPath(*pf.out, *pf.format); return err }}
}

// outputPath returns the -o path, or the default name, and checks its
// format, and that it is not something rewind refuses to replace (a
// symbolic link, FIFO or device), before any work is done.
//
// The default name, rewind-TIME.html in the current directory, is one no
// file has: a second profile written within the same second (a script
// reporting several perf.data files) is rewind-TIME-2.html rather than
// a replacement of the first. The name returned is the one free now;
// session.WriteProfile claims the first free one atomically when it writes
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
