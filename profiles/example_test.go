package profiles_test

import (
	"fmt"
	"log"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/profiles"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/unwind"
)

// Building a pprof profile from a perf.data file (perf record
// --call-graph dwarf): every sample's stack copy is unwound with the
// default methods, its frames symbolized, and the stacks made a pprof
// profile (write it with its Write method and open it with go tool
// pprof). The recording is perf's of testdata/spin/spin.c, made on
// another machine: the files it names are opened from testdata
// (without ReadOptions.Open they would be opened at the recorded paths).
func ExampleReadPerfData() {
	open := func(path, buildID string) (*elfobj.File, error) {
		return elfobj.Open(filepath.Join("testdata/spin", filepath.Base(path)))
	}
	pd, err := profiles.ReadPerfData("testdata/spin/perf.data", regs.AMD64, profiles.ReadOptions{Warn: func(w string) { log.Print(w) }, Open: open})
	if pd == nil {
		log.Fatal(err)
	}
	defer pd.Close() // the samples' stack copies are in the file
	if err != nil {
		log.Printf("%v: using the records before it", err)
	}
	u, _ := unwind.ByName("auto")
	b := profiles.NewBuilder(pd.Collector, profiles.Options{
		Methods:    []profiles.Method{{Name: "auto", Unwinder: u}},
		Symbolizer: &symbolize.Symbolizer{Inlines: true},
	})
	b.Add(pd.Collector.Samples())
	pp := b.Profile().Pprof(pd.PeriodNS)
	total := int64(0)
	stacks := map[string]int64{}
	for _, s := range pp.Sample {
		var names []string
		for _, loc := range s.Location {
			for _, ln := range loc.Line {
				names = append(names, ln.Function.Name)
			}
		}
		total += s.Value[0]
		stacks[strings.Join(names, " <- ")] += s.Value[0]
	}
	fmt.Printf("%d samples of %s\n", total, filepath.Base(pp.Mapping[0].File))
	for _, st := range slices.Sorted(maps.Keys(stacks)) {
		fmt.Printf("%d %s\n", stacks[st], st)
	}
	// Output:
	// 5 samples of spin
	// 5 spin <- work <- _start
}
