package bpfunwind_test

import (
	"fmt"
	"time"

	"github.com/rewindstack/rewind/bpfunwind"
	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/profiles"
)

// Sample every CPU at 99 Hz for a second, walking user stacks in the
// kernel, and hand the counted stacks to a profile collector, as
// rewind agent does every period.
func Example() {
	col := profiles.NewCollector(perfevent.Arch())
	u, err := bpfunwind.Load(bpfunwind.Options{Objects: col.Objects})
	if err != nil {
		fmt.Println("no in-kernel unwinding:", err) // then unwind stack copies
		return
	}
	defer u.Close()
	if err := u.OnCPU(99); err != nil {
		fmt.Println(err)
		return
	}
	time.Sleep(time.Second)
	stacks, err := u.Read()
	if err != nil {
		fmt.Println(err)
		return
	}
	u.Feed(col, stacks, perfevent.Now(), uint64(time.Second/99))
	prof := profiles.Build(col, profiles.Options{})
	fmt.Println(len(prof.Stacks) > 0)
}
