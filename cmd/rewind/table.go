package main

import (
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/internal/textesc"
	"github.com/rewindstack/rewind/unwindtable"
)

func runTable(args []string) error {
	fs := newFlags("table", `rewind table FILE...: compile each object's .eh_frame and .debug_frame into
rewind's unwind table and report FDEs, rows, distinct rules, bytes, bytes per
row and build time.`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("need at least one FILE (rewind table --help lists the flags)")
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "FDEs\tbad\trows\trules\texprs\tbytes\tbytes/row\tbuild\t  file")
	for _, path := range fs.Args() {
		f, err := elfobj.Open(path)
		if err != nil {
			return err
		}
		start := time.Now()
		t, err := unwindtable.BuildFile(f)
		el := time.Since(start)
		f.Close()
		if err != nil {
			return err
		}
		s := t.Stats()
		per := 0.0
		if s.Rows > 0 {
			per = float64(t.Bytes()) / float64(s.Rows)
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%.2f\t%.1fms\t  %s\n", s.FDEs, s.BadFDEs, s.Rows, s.Rules, s.Exprs,
			t.Bytes(), per, float64(el.Microseconds())/1000, textesc.String(path))
		if s.FirstError != "" {
			fmt.Fprintf(os.Stderr, "rewind: %s: first skipped FDE: %s\n", textesc.String(path), textesc.String(s.FirstError))
		}
	}
	return tw.Flush()
}
