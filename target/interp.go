package target

// InterpStack is one runtime's interpreted frames on a context: several
// runtimes can share a thread (Python calling into Lua through a C
// extension), each placing its frames by its own native entry function.
type InterpStack struct {
	// Entry is the native function of the runtime's interpreter entry:
	// activation k's frames go before (leafward of) its k-th physical
	// frame, innermost first, unless their anchors say where.
	Entry string
	// EntryPCs, when not empty, also make entries of the physical frames
	// whose PC lies in one of them: an interpreter whose entry function
	// has no symbol (a stripped LuaJIT) is found by its code's range.
	EntryPCs []PCRange
	// Frames are the interpreted frames, innermost first.
	Frames []InterpFrame
}

// PCRange is a range of code addresses, [Lo, Hi).
type PCRange struct{ Lo, Hi uint64 }

// entryPC reports whether pc lies in one of rs.
func entryPC(rs []PCRange, pc uint64) bool {
	for _, r := range rs {
		if pc >= r.Lo && pc < r.Hi {
			return true
		}
	}
	return false
}

// SetInterp gives the context st, in place of the stack of the same
// entry function it had (a runtime's frames re-read), or after the
// others.
func (c *Context) SetInterp(st InterpStack) {
	for i := range c.Interp {
		if c.Interp[i].Entry == st.Entry {
			c.Interp[i] = st
			return
		}
	}
	c.Interp = append(c.Interp, st)
}

// NativeStack is the native side of a splice, innermost first: a
// dump's symbolized frames, a profile sample's locations.
type NativeStack interface {
	// Len is the number of native frames.
	Len() int
	// IsEntry reports whether frame i is a physical activation of
	// function fn (not a call inlined into one).
	IsEntry(i int, fn string) bool
	// Holding returns the frame whose stack holds address addr (between
	// its SP and its caller's), -1 when none or unknown.
	Holding(addr uint64) int
	// PhysPC is frame i's PC when it is a physical frame (not a call
	// inlined into one), 0 otherwise or when unknown.
	PhysPC(i int) uint64
}

// SpliceOptions say where the frames of an activation that has no
// native entry frame go (a walk cut short, an interpreter without
// symbols).
type SpliceOptions struct {
	// Outermost puts them before the outermost entry frame, and drops
	// them when there is none: a profile keeps the native stack's root,
	// so that its flame graph does not grow a root per Python stack.
	// Otherwise they go after the native frames, in order, as a dump
	// shows everything it read.
	Outermost bool
}

// Splice interleaves the interpreted frames of stacks with the native
// frames of nat, calling native for each native frame and interp for
// each interpreted one, in output order (innermost first). Frames that
// go before the same native frame come in stacks' order.
func Splice(stacks []InterpStack, nat NativeStack, opt SpliceOptions, native func(i int), interp func(f *InterpFrame)) {
	n := nat.Len()
	pos := make([][]int, len(stacks))
	for s := range stacks {
		pos[s] = place(&stacks[s], nat, n, opt)
	}
	next := make([]int, len(stacks))
	emit := func(upTo int) {
		for s := range stacks {
			for ; next[s] < len(pos[s]) && pos[s][next[s]] <= upTo; next[s]++ {
				if pos[s][next[s]] >= 0 {
					interp(&stacks[s].Frames[next[s]])
				}
			}
		}
	}
	for i := 0; i < n; i++ {
		emit(i)
		native(i)
	}
	emit(n)
}

// place returns where each frame of st goes: before native frame
// pos[j], after them all when n, dropped when -1; pos never decreases,
// so the frames keep their order.
func place(st *InterpStack, nat NativeStack, n int, opt SpliceOptions) []int {
	fs := st.Frames
	if len(fs) == 0 {
		return nil
	}
	// Activations beyond the native frames have none to go before.
	acts := max(min(fs[len(fs)-1].Activation+1, n+1), 1)
	entry := anchored(fs, nat, acts)
	if entry == nil {
		entry = make([]int, 0, acts)
		for i := 0; i < n; i++ {
			if nat.IsEntry(i, st.Entry) || (len(st.EntryPCs) > 0 && entryPC(st.EntryPCs, nat.PhysPC(i))) {
				entry = append(entry, i)
			}
		}
	}
	pos := make([]int, len(fs))
	prev := -1
	for j := range fs {
		a := fs[j].Activation
		p := n
		switch {
		case opt.Outermost && len(entry) == 0:
			p = -1
		case a >= 0 && a < len(entry) && (a < acts || opt.Outermost):
			p = entry[a]
		case opt.Outermost:
			p = entry[len(entry)-1]
			if a < 0 {
				p = entry[0]
			}
		}
		if p >= 0 && p < prev {
			p = prev
		}
		pos[j], prev = p, max(prev, p)
	}
	return pos
}

// anchored returns the native frame of each of the first acts
// activations from their anchors (each activation's first non-zero one),
// or nil unless every activation has one, in order: a stack is placed by
// anchors alone or by names alone.
func anchored(fs []InterpFrame, nat NativeStack, acts int) []int {
	at := map[int]int{}
	for _, f := range fs {
		if _, ok := at[f.Activation]; ok || f.Anchor == 0 {
			continue
		}
		if i := nat.Holding(f.Anchor); i >= 0 {
			at[f.Activation] = i
		}
	}
	entry := make([]int, acts)
	for k := range entry {
		i, ok := at[k]
		if !ok || (k > 0 && i <= entry[k-1]) {
			return nil
		}
		entry[k] = i
	}
	return entry
}
