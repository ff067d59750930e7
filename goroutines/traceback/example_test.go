package traceback_test

import (
	"os"

	"github.com/rewindstack/rewind/goroutines/traceback"
	"github.com/rewindstack/rewind/output"
)

// ExampleWriteText writes a report in Go's traceback format. A report of
// a real process comes from traceback.New over the goroutines package
// goroutines read (see that package's example); this one is written by
// hand: two goroutines parked on the same channel receive, folded into
// one by WriteGrouped.
func ExampleWriteText() {
	frames := []output.Frame{
		{Function: "main.worker", File: "/src/main.go", Line: 12, Offset: 0x45},
	}
	created := &traceback.Creator{Function: "main.main", File: "/src/main.go", Line: 30, Goroutine: 1, Offset: 0x7f}
	rep := &traceback.Report{GoVersion: "go1.26.1", Goroutines: []traceback.Entry{
		{ID: 7, Status: "waiting", WaitReason: "chan receive", WaitMinutes: 3, Frames: frames, CreatedBy: created},
		{ID: 8, Status: "waiting", WaitReason: "chan receive", WaitMinutes: 3, Frames: frames, CreatedBy: created},
	}}
	traceback.WriteText(os.Stdout, rep)
	os.Stdout.WriteString("--- grouped\n")
	traceback.WriteGrouped(os.Stdout, rep)
	// Output:
	// goroutine 7 [chan receive, 3 minutes]:
	// main.worker(...)
	// 	/src/main.go:12 +0x45
	// created by main.main in goroutine 1
	// 	/src/main.go:30 +0x7f
	//
	// goroutine 8 [chan receive, 3 minutes]:
	// main.worker(...)
	// 	/src/main.go:12 +0x45
	// created by main.main in goroutine 1
	// 	/src/main.go:30 +0x7f
	// --- grouped
	// goroutine 7 [chan receive, 3 minutes, 2 goroutines: 7 8]:
	// main.worker(...)
	// 	/src/main.go:12 +0x45
	// created by main.main in goroutine 1
	// 	/src/main.go:30 +0x7f
}
