package live

import (
	"fmt"
	"runtime"

	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
)

// HostArch is the architecture of the processes Capture captures: this
// program's own (regs.Unknown on one rewind does not unwind).
var HostArch = map[string]regs.Arch{"amd64": regs.AMD64, "arm64": regs.ARM64}[runtime.GOARCH]

// Target makes a target of the snapshot: its threads (those captured; a
// thread that could not be is reported through warn) over its memory and
// mappings. Objects are opened through the snapshot (OpenObject:
// /proc/PID/map_files, then /proc/PID/root), so processes in other mount
// namespaces and deleted files work; the [vdso] is read from the
// process's memory. objs may be nil; warn may be nil.
func (s *Snapshot) Target(objs *target.Objects, warn func(string)) *target.Target {
	if objs == nil {
		objs = &target.Objects{}
	}
	if objs.Open == nil {
		objs.Open = s.OpenObject
	}
	ctxs := make([]target.Context, 0, len(s.Threads))
	for _, th := range s.Threads {
		if th.Err != nil {
			if warn != nil {
				warn(fmt.Sprintf("thread %d: %v", th.TID, th.Err))
			}
			continue
		}
		ctx := target.Thread(th.TID, th.Name, th.Regs)
		ctx.TP = th.TP
		ctx.Mem = th.memory(s.Mem)
		ctxs = append(ctxs, ctx)
	}
	return target.New(target.Config{
		PID:      s.PID,
		Source:   s.Exe,
		Arch:     hostArch,
		Mem:      s.Mem,
		Mappings: s.Maps,
		Objects:  objs,
		Contexts: ctxs,
		Warn:     warn,
	})
}

// memory is what the thread's walk reads: its own copies first, then
// everything the capture copied (mem). The copies of a staggered capture
// were taken at different times, each in its thread's stop, and they may
// overlap: a stack copy runs up to MaxStack bytes above its SP, which in
// the Go heap covers other threads' system stacks and goroutine stacks.
// Read through the shared snapshot, a thread's stack could come from
// another thread's older copy, taken before it stopped (garbage frames
// under load). In a capture with one pause the overlapping copies agree.
func (th *Thread) memory(mem target.Memory) target.Memory {
	if len(th.Stack.Data) == 0 && len(th.switched) == 0 {
		return nil
	}
	own := make([]target.Region, 0, 1+len(th.switched))
	if len(th.Stack.Data) > 0 {
		own = append(own, th.Stack)
	}
	own = append(own, th.switched...)
	return &target.Snapshot{Regions: own, Next: mem}
}
