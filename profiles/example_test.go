package profiles_test

import (
	"log"
	"os"

	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/profiles"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/unwind"
)

// Building a pprof profile from a perf.data file (perf record
// --call-graph dwarf): every sample's stack copy is unwound with the
// default methods, its frames symbolized, and the stacks written in
// pprof's format (open it with go tool pprof).
func ExampleReadPerfData() {
	pd, err := profiles.ReadPerfData("perf.data", perfevent.Arch(), func(w string) { log.Print(w) })
	if pd == nil {
		log.Fatal(err)
	}
	defer pd.Close()
	if err != nil {
		log.Printf("%v: using the records before it", err)
	}
	u, _ := unwind.ByName("auto")
	b := profiles.NewBuilder(pd.Collector, profiles.Options{
		Methods:    []profiles.Method{{Name: "auto", Unwinder: u}},
		Symbolizer: &symbolize.Symbolizer{Inlines: true},
	})
	b.Add(pd.Collector.Samples())
	out, err := os.Create("cpu.pb.gz")
	if err != nil {
		log.Fatal(err)
	}
	defer out.Close()
	if err := b.Profile().WritePprof(out, pd.PeriodNS); err != nil {
		log.Fatal(err)
	}
}
