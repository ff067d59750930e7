// Command rewind captures and prints stack traces: of live processes and
// core files (dump), of sampled CPU profiles (record, report), and works
// with SFrame sections (sframe). Run `rewind help` for the commands.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rewindstack/rewind/internal/cachefile"
	"github.com/rewindstack/rewind/internal/gcdefer"
	"github.com/rewindstack/rewind/internal/hugeheap"
	"github.com/rewindstack/rewind/internal/textesc"
	"github.com/rewindstack/rewind/unwind"
)

const usage = `rewind: fast, correct stack traces for Linux.

Usage:
  rewind demo                      compile a bundled C program, capture it, and show
                                   frame-pointer and DWARF stacks side by side
  rewind dump PID [flags]          print every thread's stack of a running process
  rewind dump --core FILE [flags]  print every thread's stack of a core file
  rewind dump PID --goroutines     print every goroutine of a Go program (live or --core),
                                   in Go's own traceback format
  rewind dump PID --fibers         also every inactive fiber (Tarantool's, with Lua frames;
                                   --fiber KIND@ADDR, --fiber-scan for ucontext, boost, libcoro)
  rewind table FILE...             compile objects' DWARF CFI into unwind tables and
                                   print their size and build time
  rewind sframe dump FILE...       print .sframe sections exactly as readelf --sframe does
  rewind sframe gen IN -o OUT      compile an object's .eh_frame into an .sframe section
  rewind record -p PID | -- CMD    sample a process's CPU use; unwind with DWARF/SFrame/FP;
                                   write a flame graph, pprof or folded stacks
  rewind report perf.data [-o F]   unwind perf's recording (--call-graph dwarf) with rewind and
                                   write the same outputs as record
  rewind agent [flags]             profile the host continuously (on- and off-CPU) and send
                                   OTLP profiles, Pyroscope pushes or pprof files every period
  rewind goshadow overlay          write a Go build overlay adding software shadow stacks

Run 'rewind COMMAND --help' (or 'rewind help COMMAND') for a command's flags.
Exit status: 0, 1 on an error, 2 for a command line rewind cannot run;
rewind record -- CMD exits with CMD's status when CMD fails (127: CMD not
found, 126: not executable).
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	if os.Args[1] == "dump" && coldDump(os.Args[2:]) {
		// A dump that reads debug information grows its heap by about
		// 20 MB: in huge pages (internal/hugeheap).
		hugeheap.Reserve(hugeheapDump)
	}
	if os.Args[1] != "agent" {
		// Commands other than the agent are short-lived: most finish
		// before a 64 MB heap, and collecting earlier only costs time.
		gcdefer.Until(64 << 20)
	}
	if profileRun != nil {
		os.Exit(profileRun(runCommand))
	}
	os.Exit(runCommand())
}

// hugeheapDump is the heap a cold dump reserves in huge pages (see
// coldDump).
var hugeheapDump = 48 << 20

// coldDump reports whether a dump with arguments args will read debug
// information rather than the cache's indexes: with --no-cache, or when
// the cache has no DWARF index yet (the first dump on a machine). A cold
// dump of the 17-thread fixture touched 3,000 pages with its heap in 4 KiB
// pages and 760-970 with 48 MB reserved in huge pages (16 MB: 1,630; 32
// MB: 890-1,060), using 68-70 ms of CPU instead of 117-130 ms on the
// development VM (perf stat -r 11, load 13); a
// warm one, whose heap grows little, was slower with them (the
// collection and the huge pages' zeroing cost more than its faults).
func coldDump(args []string) bool {
	for _, a := range args {
		if a == "--no-cache" || a == "-no-cache" || a == "--no-cache=true" || a == "-no-cache=true" {
			return true
		}
	}
	dir := cachefile.Dir()
	if dir == "" {
		return true
	}
	_, err := os.Stat(filepath.Join(dir, "dwarf"))
	return err != nil
}

// profileRun, when set (see cpuprofile.go), runs the command.
var profileRun func(run func() int) int

func runCommand() int { return runArgs(os.Args[1], os.Args[2:]) }

// runArgs runs command cmd with its arguments and returns the exit
// status: 0, 1 for an error, 2 for a usage error (an unknown command or
// flag, a missing subcommand).
func runArgs(cmd string, args []string) int {
	var err error
	switch cmd {
	case "demo":
		err = runDemo(args)
	case "dump":
		err = runDump(args)
	case "table":
		err = runTable(args)
	case "sframe":
		err = runSFrame(args)
	case "record":
		err = runRecord(args)
	case "report":
		err = runReport(args)
	case "agent":
		err = runAgent(args)
	case "goshadow":
		err = runGoshadow(args)
	case "version", "--version", "-version":
		printVersion(os.Stdout)
		return 0
	case "help", "-h", "--help":
		if len(args) > 0 && args[0] != "help" && !strings.HasPrefix(args[0], "-") {
			return runArgs(args[0], []string{"--help"}) // rewind help CMD
		}
		fmt.Print(usage)
		return 0
	default:
		fmt.Fprintf(os.Stderr, "rewind: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		var st interface{ ExitStatus() int }
		if errors.As(err, &st) {
			// The status of the command record ran (its message, if
			// any, was said).
			if msg := err.Error(); msg != "" {
				fmt.Fprintf(os.Stderr, "rewind %s: %s\n", textesc.String(cmd), textesc.String(msg))
			}
			return st.ExitStatus()
		}
		fmt.Fprintf(os.Stderr, "rewind %s: %s\n", textesc.String(cmd), textesc.String(withPrivilegeHint(cmd, err)))
		var ue *usageError
		if errors.As(err, &ue) {
			fmt.Fprint(os.Stderr, ue.help)
			return 2
		}
		return 1
	}
	return 0
}

// withPrivilegeHint returns err's message, followed, when it is a refusal
// to read a process's /proc files that does not say what would allow it
// (another user's process, one not dumpable), by the privilege and how
// to give it.
func withPrivilegeHint(cmd string, err error) string {
	msg := err.Error()
	if !errors.Is(err, fs.ErrPermission) || !strings.Contains(msg, "/proc/") || strings.Contains(msg, "CAP_") {
		return msg
	}
	switch cmd {
	case "record", "agent":
		return msg + ": profiling another user's process needs root, or CAP_PERFMON and CAP_SYS_PTRACE: run rewind as root or give it " +
			"both (setcap cap_perfmon,cap_sys_ptrace=ep rewind)"
	}
	return msg + ": reading another user's process needs root or CAP_SYS_PTRACE: run rewind as root or give it " +
		"CAP_SYS_PTRACE (setcap cap_sys_ptrace=ep rewind)"
}

// usageError is a command line rewind cannot run: a bad flag, a missing
// subcommand. It exits with status 2, as an unknown command does; help,
// when set, is printed after the error line as is.
type usageError struct {
	err  error
	help string
}

// usagef returns a usageError with a formatted message: arguments rewind
// cannot run with (a missing or extra argument, flags that do not go
// together).
func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// flagsMade, when set (tests), is called with every command's flag set.
var flagsMade func(*flag.FlagSet)

// newFlags makes a flag set whose --help prints the command's summary.
func newFlags(name, summary string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(os.Stdout) // --help is an answer, not an error
	if flagsMade != nil {
		flagsMade(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "%s\n\nFlags:\n", summary)
		fs.PrintDefaults()
	}
	return fs
}

// parseArgs parses flags that may come before or after positional
// arguments ("rewind dump 1234 --json") and returns the positional ones.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	// A bad flag is one line of error (returned), not the help text; only
	// --help prints the help, to stdout.
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	defer func() { fs.SetOutput(out); fs.Usage = usage }()
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(out)
				usage()
				return nil, err
			}
			return nil, &usageError{err: err}
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// methodFlag registers --method.
func methodFlag(fs *flag.FlagSet) *string {
	return fs.String("method", "auto", "unwind with `METHOD`: auto (per frame: SFrame where the object has it, "+
		"then CFI, then a Go program's pcln table, then frame pointers), fp (frame pointers), dwarf (CFI tables), "+
		"sframe (.sframe sections) or gopclntab (Go pcln tables)")
}

func unwinderFor(method string, maxDepth int) (*unwind.Unwinder, error) {
	u, err := unwind.ByName(method)
	if err != nil {
		return nil, fmt.Errorf("unknown --method %q (want auto, dwarf, fp, sframe or gopclntab)", method)
	}
	u.MaxDepth = maxDepth
	return u, nil
}

// parseTIDs parses "1,2,3".
func parseTIDs(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad thread id %q in --threads", f)
		}
		out = append(out, n)
	}
	return out, nil
}
