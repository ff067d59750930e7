package stacks

import (
	"fmt"
	"strings"

	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/unwind"
)

// FromLive makes a target of a live snapshot. Objects are opened through
// the snapshot (/proc/PID/map_files, then /proc/PID/root), so processes in
// other mount namespaces and deleted files work; the [vdso] is read from
// the process's memory. warn receives one line per mapping that could not
// be used (it may be nil).
func FromLive(s *live.Snapshot, objs *unwind.Objects, warn func(string)) *Target {
	if objs.Open == nil {
		objs.Open = s.OpenObject
	}
	var maps []unwind.Mapping
	for _, m := range s.Maps {
		switch {
		case m.Path == "[vdso]":
			vm, err := VDSOMapping(s.Mem, m.Start, m.End, objs)
			if err != nil && warn != nil {
				warn(err.Error())
			}
			maps = append(maps, vm)
		case strings.HasPrefix(m.Path, "/"):
			maps = append(maps, unwind.Mapping{Start: m.Start, End: m.End, Offset: m.Offset, Path: m.Path})
		}
	}
	t := &Target{
		PID:    s.PID,
		Source: s.Exe,
		Mem:    s.Mem,
		Space:  unwind.NewAddressSpace(maps, objs),
	}
	for _, th := range s.Threads {
		if th.Err != nil {
			if warn != nil {
				warn(fmt.Sprintf("thread %d: %v", th.TID, th.Err))
			}
			continue
		}
		t.Threads = append(t.Threads, Thread{TID: th.TID, Name: th.Name, Regs: th.Regs})
	}
	return t
}
