package session_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/profiles"
	"github.com/rewindstack/rewind/session"
)

// Recording a command for at most five seconds, as rewind record does:
// Ctrl-C ends the recording early, and the command with it; the
// collector then holds the samples, to unwind with a profiles.Builder
// and write as a profile. (Not run by go test: it needs perf_event_open
// permission.)
func ExampleSession() {
	col := profiles.NewCollector(perfevent.Arch())
	s := &session.Session{Collector: col, Duration: 5 * time.Second, GrowStack: true, AdoptOrphans: true, Log: os.Stderr}
	if err := s.Start([]string{"make", "-j4"}, perfevent.Options{Freq: 99, StackSize: 16 << 10}); err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res := s.Run(ctx)
	fmt.Printf("%s after %.1fs: %d samples, %d lost\n", res.Why, res.Elapsed.Seconds(), res.Samples, res.Lost)
	fmt.Println(len(col.Samples()), "samples to unwind")
}

// Recording a command for five seconds and writing its flame graph, as
// rewind record -d 5 -o make.html -- make -j4 does: unwound in the kernel
// when the BPF unwinder loads, else from stack copies. (Not run by go
// test: it needs perf_event_open permission.)
func ExampleRecord() {
	r := &session.Recording{Argv: []string{"make", "-j4"}, Freq: 99, Duration: 5 * time.Second, StackSize: 16 << 10,
		GrowStack: true, UnwindIn: "auto",
		Profile: session.ProfileOptions{Method: "auto", MaxDepth: 1024, Output: session.Output{Path: "make.html"}, Log: os.Stderr}}
	if err := session.CheckRecording(r); err != nil {
		log.Fatal(err)
	}
	res, err := session.Record(context.Background(), r)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("profile written:", res.Written, "command failed:", res.CommandErr != nil)
}
