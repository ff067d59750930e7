package main

import (
	"io"
	"os"
	"strconv"

	"github.com/rewindstack/rewind/dump"
	"github.com/rewindstack/rewind/goroutines/traceback"
)

// dumpGoroutines is `rewind dump --goroutines`: the goroutines of a live Go
// program (threads and goroutines copied in one pause, kept to
// --max-pause) or of a core file, written by write.
func dumpGoroutines(opt dump.Options, core string, pos []string, write func(io.Writer, *traceback.Report) error) error {
	var rep *traceback.Report
	var inputErr error
	switch {
	case core != "" && len(pos) == 0:
		if rep, inputErr = dump.CoreGoroutines(core, opt); rep == nil {
			return inputErr
		}
	case core == "" && len(pos) == 1:
		pid, err := strconv.Atoi(pos[0])
		if err != nil || pid <= 0 {
			return usagef("%q is not a process ID", pos[0])
		}
		if rep, err = dump.LiveGoroutines(pid, opt); err != nil {
			return err
		}
	default:
		return usagef("need a PID or --core FILE")
	}
	if err := write(os.Stdout, rep); err != nil {
		return err
	}
	return inputErr
}

// goroutineWriter returns the writer of a goroutine dump: Go's traceback
// format, or JSON (asJSON), identical stacks folded (group), pprof labels
// in the headers in the target Go version's syntax (labels).
func goroutineWriter(asJSON, group, labels bool) func(io.Writer, *traceback.Report) error {
	text := traceback.TextOptions{Labels: labels}
	switch {
	case asJSON && group:
		return traceback.WriteGroupedJSON
	case asJSON:
		return traceback.WriteJSON
	case group:
		return text.WriteGrouped
	}
	return text.WriteText
}
