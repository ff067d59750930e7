package live

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/rewindstack/rewind/internal/jitdump"
	"github.com/rewindstack/rewind/internal/perfmap"
	"github.com/rewindstack/rewind/internal/procmaps"
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
		ctx.Stopped = target.StopStopped
		if th.Asleep {
			ctx.Stopped = target.StopNotStopped
		}
		// The thread's own copies first, then the snapshot's memory,
		// which stops at the end of its stack copy.
		mem := s.cutAtCopy(&th)
		base := mem
		if base == nil {
			base = s.Mem
		}
		if own := th.memory(base); own != nil {
			mem = own
		}
		ctx.Mem = mem
		ctxs = append(ctxs, ctx)
	}
	tg := target.New(target.Config{
		PID:      s.PID,
		Source:   s.Exe,
		Arch:     hostArch,
		Mem:      s.Mem,
		Mappings: s.Maps,
		Objects:  objs,
		Contexts: ctxs,
		Warn:     warn,
	})
	attachPerfMap(tg, warn)
	return tg
}

// attachPerfMap names the code JIT compilers generated in the process's
// anonymous executable memory from its jitdump (a file jit-PID.dump the
// process maps, as perf inject --jit finds it) and its perf map
// (/tmp/perf-PID.map, as perf reads it), when it has them: the jitdump
// first, for its names come with lines.
func attachPerfMap(tg *target.Target, warn func(string)) {
	var anon []*target.Mapping
	dump := ""
	for _, m := range tg.Space.Mappings() {
		if m.Path == "" && m.Executable() {
			anon = append(anon, m)
		}
		if m.IsFile() && jitdump.IsDump(m.Path) {
			dump = m.Path
		}
	}
	if len(anon) == 0 {
		return
	}
	var srcs target.JITSources
	if dump != "" {
		if d, err := jitdump.OpenProcess(tg.PID, dump); err != nil {
			if warn != nil {
				warn(err.Error())
			}
		} else {
			// (Truncated is no news: a running writer's last record
			// may be half written.)
			srcs = append(srcs, d)
		}
	}
	pm, err := perfmap.Open(tg.PID)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) && warn != nil {
			warn(err.Error())
		}
	} else {
		if warn != nil && pm.Skipped > 0 {
			warn(fmt.Sprintf("perf map of process %d: %d lines skipped (not START SIZE NAME, or longer than %d bytes)", tg.PID, pm.Skipped, perfmap.MaxLine))
		}
		srcs = append(srcs, pm)
	}
	var jit target.JITSymbols
	switch len(srcs) {
	case 0:
		return
	case 1:
		jit = srcs[0]
	default:
		jit = srcs
	}
	for _, m := range anon {
		m.JIT = jit
	}
}

// ErrBeyondCopy is why a thread's walk cannot read its stack past the
// copy Capture made (Options.MaxStack): the process ran on after the
// capture, and what lies there now is not what the thread had.
var ErrBeyondCopy = errors.New("beyond the copy of the thread's stack (Options.MaxStack bytes)")

// cutAtCopy returns the memory th's walk reads when Capture copied only
// part of its stack: the snapshot's, but failing for the rest of the
// stack's mapping past the copy instead of reading the resumed process.
// nil (the snapshot's memory) when the copy reaches the mapping's end or
// there is none.
func (s *Snapshot) cutAtCopy(th *Thread) target.Memory {
	sm, ok := s.Mem.(*target.Snapshot)
	if !ok || len(th.Stack.Data) == 0 {
		return nil
	}
	end := th.Stack.Addr + uint64(len(th.Stack.Data))
	m := procmaps.Find(s.Maps, th.Stack.Addr)
	if m == nil || end >= m.End {
		return nil
	}
	return &target.Snapshot{Regions: sm.Regions, Next: &cutMemory{next: sm.Next, from: end, to: m.End}}
}

// cutMemory is next, except for [from, to), which it refuses.
type cutMemory struct {
	next     target.Memory
	from, to uint64
}

func (c *cutMemory) ReadMemory(addr uint64, p []byte) error {
	if addr < c.to && addr+uint64(len(p)) > c.from {
		return &target.MemoryError{Addr: addr, Err: ErrBeyondCopy}
	}
	if c.next == nil {
		return &target.MemoryError{Addr: addr}
	}
	return c.next.ReadMemory(addr, p)
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
