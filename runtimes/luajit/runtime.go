package luajit

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/runtimes"
	"github.com/rewindstack/rewind/target"
)

// The reader registers itself: commands find it in runtimes.All, and
// --no-lua leaves its frames out.
func init() { runtimes.Register(registered{}) }

// registered is package luajit as a runtimes.Runtime; fibers lists the
// suspended coroutines (runtimes.Options.Fibers).
type registered struct{ fibers bool }

func (registered) With(o runtimes.Options) runtimes.Runtime { return registered{fibers: o.Fibers} }

func (registered) Name() string { return Method }

func (registered) Usage() string {
	return "do not show the Lua frames (and suspended coroutines) of a LuaJIT 2.1 process"
}

func (r registered) Live(pid int, maps []target.Mapping) (runtimes.Live, error) {
	if maps == nil {
		return nil, nil // (unreadable maps: the capture says why)
	}
	f, err := Find(maps, runtimes.ProcessFile(pid))
	if f == nil {
		return nil, note(err)
	}
	return &registeredLive{found: f, fibers: r.fibers, pid: pid, maps: maps}, nil
}

func (r registered) Core(tg *target.Target, warn func(string)) {
	f, err := Find(runtimes.Maps(tg.Space), runtimes.CoreFiles(tg.Space))
	if err = note(err); err != nil && warn != nil {
		warn(err.Error())
	}
	if f != nil {
		Read(tg, f, r.fibers, warn)
	}
}

// note prefixes err, if any, with what it is about.
func note(err error) error {
	if err == nil {
		return nil
	}
	return &noteError{err}
}

type noteError struct{ err error }

func (e *noteError) Error() string { return "Lua frames: " + e.err.Error() }

// registeredLive reads a live LuaJIT process's Lua frames. In the
// threads' pause (During) it finds the VM's C frames on each thread's
// stack, from the stack pointer /proc says, and copies what a walk of
// those lua_States reads that changes as Lua runs: the lua_States and
// their Lua stacks. Attach walks over those copies, the native stacks
// the pause copied and, for what does not change while a function runs
// (prototypes, bytecode, strings) and for the suspended coroutines, the
// process.
type registeredLive struct {
	found  *Found
	fibers bool
	pid    int
	maps   []target.Mapping

	copies []target.Region // what During copied
}

func (r *registeredLive) During(rd *live.Reader) {
	r.copies = nil
	var ls []uint64
	seen := map[uint64]bool{}
	for _, th := range rd.Threads() {
		if rd.Expired() {
			break // what is left is read after the pause
		}
		sp, ok := threadSP(r.pid, th.TID)
		if !ok {
			continue
		}
		end := sp + maxScan
		for i := range r.maps {
			if m := &r.maps[i]; m.Start <= sp && sp < m.End {
				end = m.End
			}
		}
		for _, l := range r.found.Layouts() {
			cfs := ScanStack(rd, &l, sp, end)
			for _, cf := range cfs {
				if !seen[cf.L] {
					seen[cf.L] = true
					ls = append(ls, cf.L)
				}
			}
			if len(cfs) > 0 {
				r.copies = append(r.copies, copyStates(rd, &l, ls)...)
				break
			}
		}
		ls = ls[:0]
	}
}

func (r *registeredLive) Attach(tg *target.Target, warn func(string)) {
	Read(tg, r.found, r.fibers, warn, r.copies...)
}

// threadSP is the stack pointer of a stopped or sleeping thread, from
// /proc/PID/task/TID/syscall (its last two fields; "running" has none).
func threadSP(pid, tid int) (uint64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/syscall", pid, tid))
	if err != nil {
		return 0, false
	}
	fs := strings.Fields(string(b))
	if len(fs) < 3 {
		return 0, false
	}
	sp, err := strconv.ParseUint(strings.TrimPrefix(fs[len(fs)-2], "0x"), 16, 64)
	return sp, err == nil && sp != 0
}

// maxStackCopy bounds the Lua stack copied per lua_State in the pause.
const maxStackCopy = 256 << 10

// stateCopy is how much of a lua_State is copied: every field the walk
// reads lies below.
const stateCopy = 128

// copyStates copies, in two batches, the lua_States ls and their Lua
// stacks (L->stacksize slots from L->stack).
func copyStates(br live.BatchReader, l *Layout, ls []uint64) []target.Region {
	states := make([]live.Read, len(ls))
	for i, L := range ls {
		states[i] = live.Read{Addr: L, Buf: make([]byte, stateCopy)}
	}
	br.ReadBatch(states)
	stacks := make([]live.Read, 0, len(ls))
	le := binary.LittleEndian
	for _, st := range states {
		if st.N != len(st.Buf) {
			continue
		}
		stack := le.Uint64(st.Buf[l.LStack:])
		if !l.GC64 {
			stack &= 0xffffffff
		}
		size := 8 * uint64(le.Uint32(st.Buf[l.lStacksize:]))
		if stack != 0 && size != 0 {
			stacks = append(stacks, live.Read{Addr: stack, Buf: make([]byte, min(size, maxStackCopy))})
		}
	}
	br.ReadBatch(stacks)
	var out []target.Region
	for _, rd := range append(states, stacks...) {
		if rd.N > 0 {
			out = append(out, target.Region{Addr: rd.Addr, Data: rd.Buf[:rd.N]})
		}
	}
	return out
}
