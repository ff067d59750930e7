package unwind_test

import (
	"encoding/binary"
	"fmt"

	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// Walking a stack by frame pointers: the memory is a copy of three frame
// records (saved frame pointer, return address), as a capture would have
// taken it; the last record's zero frame pointer ends the chain.
func ExampleUnwinder_Walk() {
	const base = 0x7ffc0000
	stack := make([]byte, 64)
	record := func(at, fp, ra uint64) {
		binary.LittleEndian.PutUint64(stack[at-base:], fp)
		binary.LittleEndian.PutUint64(stack[at-base+8:], ra)
	}
	record(base+0x00, base+0x10, 0x401234) // leaf's record: caller returns to 0x401234
	record(base+0x10, base+0x20, 0x401567)
	record(base+0x20, 0, 0x401890) // outermost: no saved frame pointer
	mem := &target.Snapshot{Regions: []target.Region{{Addr: base, Data: stack}}}

	r := regs.New(regs.AMD64)
	r.Set(regs.AMD64RIP, 0x401000) // where the thread stopped
	r.Set(regs.AMD64RSP, base)
	r.Set(regs.AMD64RBP, base)

	u, _ := unwind.ByName("fp")
	st := u.Walk(r, mem, nil)
	for i, f := range st.Frames {
		fmt.Printf("#%d %#x [%s]\n", i, f.PC, f.Method)
	}
	fmt.Println("end:", st.End)
	// Output:
	// #0 0x401000 [context]
	// #1 0x401234 [fp]
	// #2 0x401567 [fp]
	// #3 0x401890 [fp]
	// end: outermost
}

// A profiler walks the same thread again and again; with a Memo per
// thread, a walk that reaches a frame the previous one passed through,
// with the same registers the rest depends on and the same stack words
// above it, copies the rest instead of stepping through it. The result is
// always the fresh walk's.
func ExampleUnwinder_WalkMemo() {
	const base = 0x7ffc0000
	stack := make([]byte, 64)
	record := func(at, fp, ra uint64) {
		binary.LittleEndian.PutUint64(stack[at-base:], fp)
		binary.LittleEndian.PutUint64(stack[at-base+8:], ra)
	}
	record(base+0x00, base+0x10, 0x401234)
	record(base+0x10, base+0x20, 0x401567)
	record(base+0x20, 0, 0x401890)
	// The code the frames return to is in the snapshot too: the walk
	// checks it for a signal trampoline, and reads outside the snapshot
	// are never reused.
	code := make([]byte, 0x1000)
	mem := &target.Snapshot{Regions: []target.Region{{Addr: base, Data: stack}, {Addr: 0x401000, Data: code}}}

	u, _ := unwind.ByName("fp")
	var m unwind.Memo
	var st unwind.Stack
	for _, pc := range []uint64{0x401000, 0x401008, 0x401010} { // three samples, the leaf moving
		r := regs.New(regs.AMD64)
		r.Set(regs.AMD64RIP, pc)
		r.Set(regs.AMD64RSP, base)
		r.Set(regs.AMD64RBP, base)
		u.WalkMemo(&st, r, mem, nil, &m)
		fmt.Printf("%d frames, %d reused so far\n", len(st.Frames), m.Reused)
	}
	// Output:
	// 4 frames, 0 reused so far
	// 4 frames, 3 reused so far
	// 4 frames, 6 reused so far
}
