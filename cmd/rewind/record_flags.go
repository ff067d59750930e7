package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// durationFlag is record's -d: a Go duration ("1.5s", "2m") or, as perf's
// users expect, a bare number of seconds ("5").
type durationFlag struct {
	d   time.Duration
	set bool
}

func (f *durationFlag) String() string {
	if f == nil || !f.set {
		return ""
	}
	return f.d.String()
}

func (f *durationFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		secs, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || secs != secs || secs > 1e9 || secs < -1e9 {
			return fmt.Errorf("bad duration %q (want seconds like 5, or 1.5s, 2m)", s)
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d <= 0 {
		return fmt.Errorf("duration %q must be greater than 0", s)
	}
	f.d, f.set = d, true
	return nil
}

// maxSampleRatePath is where the kernel publishes the highest sampling
// frequency it accepts; a variable so tests can point it elsewhere.
var maxSampleRatePath = "/proc/sys/kernel/perf_event_max_sample_rate"

// checkFreq rejects a sampling frequency the kernel would refuse (or that
// would divide by zero when the sample period is computed).
func checkFreq(freq int) error {
	if freq <= 0 {
		return fmt.Errorf("-F %d: the sampling frequency must be greater than 0", freq)
	}
	b, err := os.ReadFile(maxSampleRatePath)
	if err != nil {
		return nil // no limit known: the kernel will say
	}
	max, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err == nil && max > 0 && freq > max {
		return fmt.Errorf("-F %d: above the kernel's limit of %d (%s)", freq, max, maxSampleRatePath)
	}
	return nil
}

// checkOutputDir makes sure the profile can be written before a command
// runs for nothing: out's directory must exist and be writable.
func checkOutputDir(out string) error {
	if out == "-" || out == os.DevNull {
		return nil
	}
	dir := filepath.Dir(out)
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("-o %s: %w", out, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("-o %s: %s is not a directory", out, dir)
	}
	if st, err := os.Stat(out); err == nil && st.IsDir() {
		return fmt.Errorf("-o %s: is a directory", out)
	}
	// Write permission is not enough (root may write anywhere, but not
	// into /proc or a read-only mount): create a file there, as writing
	// the profile will.
	f, err := os.CreateTemp(dir, ".rewind-check-*")
	if err != nil {
		return fmt.Errorf("-o %s: cannot write in %s: %w", out, dir, err)
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// flagSet reports whether the flag called name was given on the command
// line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// pauseFlag is a duration flag whose documented special values are bare
// numbers: dump's --max-pause -1 (wait for every thread) and 0 (the
// default). Any other number needs its unit.
type pauseFlag struct{ d *time.Duration }

func newPauseFlag(fs *flag.FlagSet, name string, def time.Duration, usage string) *time.Duration {
	d := def
	fs.Var(pauseFlag{&d}, name, usage)
	return &d
}

func (f pauseFlag) String() string {
	if f.d == nil {
		return ""
	}
	return f.d.String()
}

func (f pauseFlag) Set(s string) error {
	switch s {
	case "-1":
		*f.d = -1
		return nil
	case "0":
		*f.d = 0
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		if _, ferr := strconv.ParseFloat(s, 64); ferr == nil {
			return fmt.Errorf("%q has no unit: want a duration such as 10ms (or -1, or 0)", s)
		}
		return fmt.Errorf("want a duration such as 10ms (or -1, or 0), not %q", s)
	}
	*f.d = d
	return nil
}

const unwindInHelp = "unwind user stacks in `WHERE`: kernel (a BPF program walks rewind's unwind tables at sample time and counts " +
	"stacks in the kernel: no stack copies, nothing lost; needs root, or CAP_BPF and CAP_PERFMON), user (stack copies " +
	"unwound by rewind afterwards), or auto: kernel when the BPF programs load, else user with a one-line note"

// unwindInFlag defines --unwind-in.
func unwindInFlag(fs *flag.FlagSet) *string { return fs.String("unwind-in", "auto", unwindInHelp) }

// checkUnwindIn rejects an unknown --unwind-in.
func checkUnwindIn(mode string) error {
	switch mode {
	case "kernel", "user", "auto":
		return nil
	}
	return usagef("--unwind-in %q: want kernel, user or auto", mode)
}
