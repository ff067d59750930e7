package profiles

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/rewindstack/rewind/internal/prefetch"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// Unwinding is most of a profile's work and each sample's walk depends on
// nothing but the sample, its address space and the (concurrency-safe)
// modules: Builder.Add walks the samples on every core, chunk by chunk,
// while the calling goroutine turns the walks of finished chunks into
// locations in sample order (symbolizing, counting fidelity), so the
// profile is the same as a one-by-one build.

// prewalkChunk is the number of samples one worker walks at a time.
const prewalkChunk = 128

// walkInCaller has every batch walked in the calling goroutine, one sample
// after the other (for the tests that compare that with the parallel
// walks).
var walkInCaller bool

// prewalkMin is the batch size below which samples are walked in the
// calling goroutine: starting workers costs more than it saves.
const prewalkMin = 64

// walked is one method's walk of one sample.
type walked struct {
	frames []unwind.Frame // in the chunk's frame arena
	key    uint64         // stackKey(frames), for the first method
	end    unwind.EndReason
	ran    bool
	copied bool // made from the first method's walk (see copyKind)
}

// walkChunk is the walks of one chunk of samples: methods walks per
// sample, the first method's at index 0.
type walkChunk struct {
	lo, hi int // sample indexes
	walks  []walked
	frames []unwind.Frame
	done   chan struct{}
}

// chunkArena is the memory of a consumed chunk, handed to a worker that
// starts another one. A report's heap is never collected (see lessGC in
// cmd/rewind), so every chunk's fresh arena cost page faults: 3.5 MB of
// the 8 MB rewind report allocated for a 2,400-sample file.
type chunkArena struct {
	walks  []walked
	frames []unwind.Frame
}

// prewalk is the walks of one Add batch, filled in by workers.
type prewalk struct {
	methods int
	chunks  []walkChunk
	// fid reports, per sample of the batch, whether the fidelity methods
	// (all but the first) walk it.
	fid []bool
	// copy says, per method, whether its walk of a sample can be made
	// from the first method's (see copyKind).
	copy []copyKind
	// spare receives the arenas of consumed chunks (the builder's, kept
	// across batches); released is the number of chunks released.
	spare    chan chunkArena
	released int
	// mu guards behind, the number of chunks released as the workers
	// see it; ahead is signalled when it grows (see prewalkAhead).
	// bounded is set when workers walk the chunks (not the caller).
	mu      sync.Mutex
	ahead   *sync.Cond
	behind  int
	bounded bool
	// frames and walks count the frames found and the walks made in the
	// chunks done so far, to size the next chunks' arenas: a guess too
	// small costs a copy into a twice larger one, and the first one is
	// garbage.
	frames, walks atomic.Int64
}

// arenaSize returns the number of frames to allocate for chunk c: what
// the chunks done so far found per walk, or 12 frames per walk before
// any is done, plus room for one deep stack.
func (pw *prewalk) arenaSize(c *walkChunk) int {
	walks := c.hi - c.lo
	for i := c.lo; i < c.hi && pw.methods > 1; i++ {
		if pw.fid[i] {
			walks += pw.methods - 1
		}
	}
	perWalk := 12.0
	if n := pw.walks.Load(); n > 0 {
		perWalk = float64(pw.frames.Load()) / float64(n)
	}
	return int(float64(walks)*perWalk*1.1) + 64
}

// release hands the arenas of the chunks before chunk ci, which the
// builder has turned into locations, to the workers.
func (pw *prewalk) release(ci int) {
	for ; pw.released < ci; pw.released++ {
		c := &pw.chunks[pw.released]
		<-c.done // a chunk of samples without registers was never waited for
		select {
		case pw.spare <- chunkArena{walks: c.walks, frames: c.frames}:
		default:
		}
		c.walks, c.frames = nil, nil
		// Each chunk is released as soon as it is: the next one waited
		// for may be one a worker holds back until then.
		pw.mu.Lock()
		pw.behind = pw.released + 1
		pw.ahead.Broadcast()
		pw.mu.Unlock()
	}
}

// prewalkAhead is how many chunks past the first one the builder has not
// released yet the workers may walk. Walkers that ran further ahead found
// no consumed chunk's arena to reuse and took fresh memory: 4.2 MB of the
// 12.4 MB rewind report allocated for a 7,670-sample file, every page of
// it a page fault, as the heap is not collected during a report. The
// chunk the builder waits for is never held back.
const prewalkAhead = 6

// waitAhead blocks while chunk ci is prewalkAhead or more chunks past the
// first one the builder has not released.
func (pw *prewalk) waitAhead(ci int) {
	if !pw.bounded {
		return
	}
	pw.mu.Lock()
	for ci-pw.behind >= prewalkAhead {
		pw.ahead.Wait()
	}
	pw.mu.Unlock()
}

// fidelityStride returns k when only every k-th sample is walked with the
// fidelity methods. The stride is fixed by the first batch (a report's
// only batch) so that the choice does not depend on how a recording was
// cut into batches.
func (b *Builder) fidelityStride(batch int) int {
	if b.stride == 0 {
		b.stride = 1
		if n := b.opt.FidelitySamples; n > 0 && batch > n {
			b.stride = (batch + n - 1) / n
		}
	}
	return b.stride
}

// startPrewalk decides which samples the fidelity methods walk and starts
// walking the batch's samples on all cores. Address spaces are built here,
// in the caller, as the collector's state is not shared.
func (b *Builder) startPrewalk(samples []*Sample) *prewalk {
	stride := b.fidelityStride(len(samples))
	if b.spare == nil {
		b.spare = make(chan chunkArena, 2*runtime.GOMAXPROCS(0)+2)
	}
	pw := &prewalk{methods: len(b.opt.Methods), fid: make([]bool, len(samples)), spare: b.spare}
	pw.ahead = sync.NewCond(&pw.mu)
	pw.copy = make([]copyKind, len(b.opt.Methods))
	for m := 1; m < len(b.opt.Methods); m++ {
		pw.copy[m] = copyKindOf(b.opt.Methods[0].Unwinder, b.opt.Methods[m].Unwinder)
	}
	spaces := make([]*target.AddressSpace, len(samples))
	for i, s := range samples {
		pw.fid[i] = b.seen%stride == 0
		if s.HasRegs {
			b.seen++
			spaces[i] = b.c.addressSpace(s.space)
		}
	}
	if len(samples) == 0 || pw.methods == 0 {
		return pw
	}
	n := (len(samples) + prewalkChunk - 1) / prewalkChunk
	pw.chunks = make([]walkChunk, n)
	for i := range pw.chunks {
		c := &pw.chunks[i]
		c.lo, c.hi = i*prewalkChunk, min((i+1)*prewalkChunk, len(samples))
		c.done = make(chan struct{})
	}
	work := func(w *walker, next *atomic.Int64) {
		for {
			i := int(next.Add(1) - 1)
			if i >= len(pw.chunks) {
				return
			}
			w.chunk(pw, &pw.chunks[i], samples, spaces)
		}
	}
	var next atomic.Int64
	workers := min(runtime.GOMAXPROCS(0), len(pw.chunks))
	if len(samples) < prewalkMin || walkInCaller {
		workers = 0
	}
	// The workers' scratch space, and their memos of each thread's last
	// walk, are kept from batch to batch (a recording's periods): the
	// workers of a batch are done with them before Add returns.
	for len(b.walkers) < max(workers, 1) {
		b.walkers = append(b.walkers, &walker{b: b})
	}
	if workers == 0 {
		work(b.walkers[0], &next)
		return pw
	}
	pw.bounded = true
	for k := range workers {
		go work(b.walkers[k], &next)
	}
	return pw
}

// get returns the walk of sample i (of the batch) with method m, waiting
// for its chunk; its ran field is false when the method did not walk it.
func (pw *prewalk) get(i, m int) *walked {
	ci := i / prewalkChunk
	pw.release(ci)
	c := &pw.chunks[ci]
	<-c.done
	return &c.walks[(i-c.lo)*pw.methods+m]
}

// walker is one worker's scratch space.
type walker struct {
	b *Builder
	// extent is how many bytes above its stack pointer the last walk
	// read (see prefetchStack).
	extent int
	st     unwind.Stack
	snap   target.Snapshot
	reg    []target.Region
	memos  memos
}

// memos keeps, per thread and method, the last walk (see unwind.Memo):
// the samples of a thread mostly differ in their innermost frames only.
type memos struct {
	by map[[2]int]*unwind.Memo
	// free holds the memos forgotten, to remember other walks in: a
	// memo is used only for walks of its own unwinder and address
	// space, and only where the registers and stack bytes are the
	// same (see unwind.WalkMemo), whichever thread it was last. New
	// ones were 158 MB of garbage in the report of a 2 GB system-wide
	// recording, with threads coming and going.
	free []*unwind.Memo
}

// maxMemos bounds the walks remembered (a memo of a deep stack holds a
// few hundred bytes per frame); past it they are all forgotten.
const maxMemos = 64

// get returns the memo of thread tid's last walk with method m.
func (ms *memos) get(tid, m int) *unwind.Memo {
	if ms.by == nil {
		ms.by = map[[2]int]*unwind.Memo{}
	}
	k := [2]int{tid, m}
	mm := ms.by[k]
	if mm == nil {
		if len(ms.by) >= maxMemos {
			for _, old := range ms.by {
				ms.free = append(ms.free, old)
			}
			clear(ms.by)
		}
		if n := len(ms.free); n > 0 {
			mm = ms.free[n-1]
			ms.free = ms.free[:n-1]
		} else {
			mm = new(unwind.Memo)
		}
		ms.by[k] = mm
	}
	return mm
}

// chunk walks one chunk's samples and marks it done.
func (w *walker) chunk(pw *prewalk, c *walkChunk, samples []*Sample, spaces []*target.AddressSpace) {
	defer close(c.done)
	pw.waitAhead(c.lo / prewalkChunk)
	var a chunkArena
	select {
	case a = <-pw.spare:
	default:
	}
	if n := (c.hi - c.lo) * pw.methods; cap(a.walks) >= n {
		c.walks = a.walks[:n]
		clear(c.walks)
	} else {
		c.walks = make([]walked, n)
	}
	if want := pw.arenaSize(c); cap(a.frames) >= want {
		c.frames = a.frames[:0]
	} else {
		c.frames = make([]unwind.Frame, 0, want)
	}
	walks := 0
	if c.lo < c.hi {
		w.prefetchStack(samples[c.lo])
	}
	for i := c.lo; i < c.hi; i++ {
		s := samples[i]
		if i+1 < c.hi {
			w.prefetchStack(samples[i+1])
		}
		if !s.HasRegs {
			continue
		}
		r := s.Regs()
		w.reg = s.regions(w.reg[:0])
		w.snap.Regions = w.reg
		for m, meth := range w.b.opt.Methods {
			if m > 0 && !pw.fid[i] {
				break
			}
			// Walk straight into the arena's free space; only a walk
			// that outgrows it is copied (frames hold a pointer: copies
			// cost write barriers).
			lo := len(c.frames)
			if m > 0 && pw.copy[m] != copyNone {
				first := &c.walks[(i-c.lo)*pw.methods]
				if frames, end, ok := pw.copy[m].walk(first.frames, first.end); ok {
					c.frames = append(c.frames, frames...)
					c.walks[(i-c.lo)*pw.methods+m] = walked{end: end, ran: true, copied: true, frames: c.frames[lo:len(c.frames):len(c.frames)]}
					walks++
					continue
				}
			}
			if cap(c.frames)-lo < 64 {
				c.frames = slices.Grow(c.frames, max(64, cap(c.frames)))
			}
			w.st.Frames = c.frames[lo:lo]
			walkSample(meth.Unwinder, &w.st, s, &r, &w.snap, spaces[i], w.memos.get(s.TID, m))
			if n := len(w.st.Frames); n > 0 && &w.st.Frames[0] == &c.frames[lo:cap(c.frames)][0] {
				c.frames = c.frames[:lo+n]
			} else {
				c.frames = append(c.frames, w.st.Frames...)
			}
			wk := walked{end: w.st.End, ran: true, frames: c.frames[lo:len(c.frames):len(c.frames)]}
			if m == 0 {
				wk.key = stackKey(wk.frames)
				w.extent = stackExtent(wk.frames)
			}
			c.walks[(i-c.lo)*pw.methods+m] = wk
			walks++
		}
	}
	pw.frames.Add(int64(len(c.frames)))
	pw.walks.Add(int64(walks))
	w.st.Frames = nil // the arena is the chunk's
	// The frame arena may have moved while it grew: point the walks into
	// its final place.
	off := 0
	for j := range c.walks {
		if wk := &c.walks[j]; wk.ran {
			n := len(wk.frames)
			wk.frames = c.frames[off : off+n : off+n]
			off += n
		}
	}
	clear(w.reg)
	w.snap.Regions = nil
}

// A walk reads a few words per frame from the stack copy, and each read
// of a line not yet cached waits for memory: the copies lie in a file's
// page cache, which nothing has read since perf wrote it. Half of a
// walk's time was these waits. While a worker walks one sample, the CPU
// fetches the stack lines the next walk will read, as far above its
// stack pointer as the last walk went (the samples of a profile mostly
// share their depth).

// maxPrefetch bounds the bytes of a stack copy fetched ahead.
const maxPrefetch = 4 << 10

// prefetchStack has the CPU fetch the lines of s's stack copy the next
// walk will probably read, without waiting for them.
func (w *walker) prefetchStack(s *Sample) {
	prefetch.Bytes(s.rawRegs) // the walk starts from them
	if n := min(len(s.Stack), w.extent, maxPrefetch); n > 0 {
		prefetch.Bytes(s.Stack[:n])
	}
}

// stackExtent returns how far above the first frame's stack pointer a
// walk read: up to its last frame's stack pointer, and the return address
// and saved registers just above it.
func stackExtent(frames []unwind.Frame) int {
	if len(frames) == 0 || frames[len(frames)-1].SP < frames[0].SP {
		return 0
	}
	return int(min(frames[len(frames)-1].SP-frames[0].SP, maxPrefetch)) + 256
}

// walk returns sample s's walk with method m: the one the workers made
// when s is the batch's current sample, else a walk made here. It is nil
// when m is a fidelity method that does not walk s.
func (b *Builder) walk(s *Sample, m int) *unwind.Stack {
	if pw := b.pw; pw != nil && b.pwAt < len(pw.fid) {
		if m > 0 && !pw.fid[b.pwAt] {
			return nil
		}
		if len(pw.chunks) > 0 {
			w := pw.get(b.pwAt, m)
			b.pst.Frames, b.pst.End, b.pstKey, b.pstCopied = w.frames, w.end, w.key, w.copied
			return &b.pst
		}
	}
	b.pstKey, b.pstCopied = 0, false
	r := s.Regs()
	b.snap.Regions = s.regions(b.snap.Regions[:0])
	walkSample(b.opt.Methods[m].Unwinder, &b.st, s, &r, &b.snap, b.c.addressSpace(s.space), b.memos.get(s.TID, m))
	clear(b.snap.Regions)
	return &b.st
}

// writeSubsampleNote says which lines of the fidelity table were measured
// on a subsample of the samples.
func writeSubsampleNote(w io.Writer, fid []Fidelity) {
	var names []string
	every := 0
	for _, f := range fid {
		if f.Every > 1 && f.Samples > 0 {
			names = append(names, f.Method)
			every = f.Every
		}
	}
	if len(names) > 0 {
		fmt.Fprintf(w, "  (%s: measured on every %s sample only, a deterministic subsample; --fidelity-samples=0 walks all)\n",
			strings.Join(names, ", "), ordinal(every))
	}
}

// ordinal returns "2nd", "3rd", "11th", ...
func ordinal(n int) string {
	suffix := "th"
	if n%100 < 11 || n%100 > 13 {
		switch n % 10 {
		case 1:
			suffix = "st"
		case 2:
			suffix = "nd"
		case 3:
			suffix = "rd"
		}
	}
	return strconv.Itoa(n) + suffix
}

// A profile has far fewer distinct stacks than samples (a hot loop is
// sampled at the same few PCs under the same callers): the locations of a
// first-method stack are looked up once per distinct stack, not once per
// frame and sample, which was half of the serial part of a build.

// knownStack is a distinct first-method stack and its locations. Of its
// frames it keeps what the locations depend on (see same): the PC
// with the exactness in its top bit (user addresses are below 1<<63), and
// the mapping. Whole frames (40 bytes) took 26 MB of the 158 MB rewind
// report held for a 2 GB system-wide recording.
type knownStack struct {
	pcs  []uint64
	maps []*target.Mapping
	locs []*Location
	ok   bool // reachesRoot(locs)
}

// exactBit marks an exact PC in knownStack.pcs.
const exactBit = 1 << 63

// newKnownStack returns the known stack of frames and their locations.
func newKnownStack(frames []unwind.Frame, locs []*Location, ok bool) *knownStack {
	k := &knownStack{pcs: make([]uint64, len(frames)), maps: make([]*target.Mapping, len(frames)), locs: locs, ok: ok}
	for i := range frames {
		k.pcs[i] = frames[i].PC
		if frames[i].Exact {
			k.pcs[i] |= exactBit
		}
		k.maps[i] = frames[i].Map
	}
	return k
}

// same reports whether frames have the known stack's locations: the same
// PCs, exactness and mappings.
func (k *knownStack) same(frames []unwind.Frame) bool {
	if len(frames) != len(k.pcs) {
		return false
	}
	for i := range frames {
		pc := frames[i].PC
		if frames[i].Exact {
			pc |= exactBit
		}
		if pc != k.pcs[i] || frames[i].Map != k.maps[i] {
			return false
		}
	}
	return true
}

// maxKnownStacks bounds the stacks remembered; past it they are all
// forgotten. (A recording of many short-lived processes, such as a 2 GB
// system-wide one beside a build, has nearly as many distinct stacks as
// samples: 209,126 of 241,901. Kept up to 65,536, they took 23 MB.)
const maxKnownStacks = 1 << 14

// stackKey hashes what a stack's locations depend on: each frame's PC,
// exactness and mapping.
func stackKey(frames []unwind.Frame) uint64 {
	h := uint64(14695981039346656037)
	for i := range frames {
		f := &frames[i]
		v := f.PC
		if f.Exact {
			v ^= 1 << 63
		}
		h = (h ^ v) * 1099511628211
		if f.Map != nil { // knownStack.same compares the mappings themselves
			h = (h ^ f.Map.Start) * 1099511628211
		}
	}
	return h | 1 // 0 means "no key"
}

// stackLocs returns the locations of method m's walk st, and whether it
// reaches the thread's root. The first method's are every frame's, shared
// between samples with the same stack (do not modify them); a fidelity
// method's frames are only counted, so only the outermost ones reachesRoot
// looks at are symbolized.
func (b *Builder) stackLocs(st *unwind.Stack, m int) ([]*Location, bool) {
	frames := st.Frames
	if m > 0 {
		frames = frames[max(0, len(frames)-3):]
		b.userLocs = b.userLocs[:0]
		for j := range frames {
			b.userLocs = append(b.userLocs, b.userLoc(&frames[j]))
		}
		return b.userLocs, reachesRoot(b.userLocs)
	}
	key := uint64(0)
	if st == &b.pst && !timedFrames(frames) {
		key = b.pstKey // (not when its names depend on the time)
	}
	if key != 0 {
		if k := b.stacks[key]; k != nil && k.same(frames) {
			return k.locs, k.ok
		}
	}
	locs := make([]*Location, len(frames))
	for j := range frames {
		locs[j] = b.userLoc(&frames[j])
	}
	ok := reachesRoot(locs)
	if key != 0 {
		if b.stacks == nil {
			b.stacks = map[uint64]*knownStack{}
		}
		if len(b.stacks) >= maxKnownStacks {
			clear(b.stacks)
		}
		if b.stacks[key] == nil {
			// What the locations depend on is kept in a copy: the
			// chunk's arena is dropped with the batch.
			b.stacks[key] = newKnownStack(frames, locs, ok)
		}
	}
	return locs, ok
}

// A fidelity table line of the CFI-only method ("dwarf") repeats, for
// most samples, the walk the default chain ("auto": SFrame, then CFI,
// then a Go pcln table, then frame pointers, per frame) already made: when SFrame had nothing
// for any frame and CFI made every step, including the last (the return
// address undefined at the thread's entry), the CFI-only walk takes the
// same steps from the same registers and memory and ends the same way.
// That walk is then copied instead of made again: it was a quarter of a
// report's unwinding. Likewise the SFrame-only walk of a sample whose
// leaf is in an object without .sframe, when the default chain found
// its caller with CFI (so the leaf is no thread root and no Go stack
// switch): it is the leaf alone, ended for want of unwind information.
// Anything else (a frame by SFrame, a pcln table, frame pointers or a
// signal frame, another end) is walked.

// copyKind is how a fidelity method's walk is made from the first
// method's.
type copyKind uint8

const (
	copyNone       copyKind = iota // walked
	copyCFI                        // the whole walk (cfiSame)
	copySFrameLeaf                 // the leaf alone (sframeLeafOnly)
)

// copyKindOf returns how method m's walks can be made from first's.
func copyKindOf(first, m *unwind.Unwinder) copyKind {
	if !isAutoChain(first) || first.MaxDepth != m.MaxDepth {
		return copyNone
	}
	switch {
	case isCFIOnly(m):
		return copyCFI
	case isSFrameOnly(m):
		return copySFrameLeaf
	}
	return copyNone
}

// walk returns the method's walk made from the first method's, and
// whether it could be.
func (k copyKind) walk(frames []unwind.Frame, end unwind.EndReason) ([]unwind.Frame, unwind.EndReason, bool) {
	switch k {
	case copyCFI:
		if cfiSame(frames, end) {
			return frames, end, true
		}
	case copySFrameLeaf:
		if sframeLeafOnly(frames) {
			return frames[:1], unwind.EndNoInfo, true
		}
	}
	return nil, 0, false
}

// isAutoChain reports whether u is the default chain, unwind.NewAuto's.
// Its Go pcln table comes after CFI, so a walk CFI made throughout never
// asked it.
func isAutoChain(u *unwind.Unwinder) bool {
	if u == nil || len(u.Steppers) != 4 {
		return false
	}
	sf, ok := u.Steppers[0].(unwind.SFrame)
	_, cfi := u.Steppers[1].(unwind.CFITable)
	_, gp := u.Steppers[2].(unwind.GoPCLN)
	_, fp := u.Steppers[3].(unwind.FramePointers)
	return ok && sf.Source == nil && cfi && gp && fp
}

// isCFIOnly reports whether u is unwind.NewDWARF's: the CFI table only.
func isCFIOnly(u *unwind.Unwinder) bool {
	if u == nil || len(u.Steppers) != 1 {
		return false
	}
	_, ok := u.Steppers[0].(unwind.CFITable)
	return ok
}

// isSFrameOnly reports whether u is unwind.NewSFrame's: .sframe only.
func isSFrameOnly(u *unwind.Unwinder) bool {
	if u == nil || len(u.Steppers) != 1 {
		return false
	}
	sf, ok := u.Steppers[0].(unwind.SFrame)
	return ok && sf.Source == nil
}

// sframeLeafOnly reports whether the SFrame-only walk of a sample is its
// leaf alone, ended for want of unwind information, given the default
// chain's walk: the leaf's caller was found by CFI (so the leaf is
// neither a thread root, which ends a walk, nor a Go stack switch, which
// would have made its caller), and the leaf's object has no .sframe.
func sframeLeafOnly(frames []unwind.Frame) bool {
	if len(frames) < 2 || frames[0].Method != unwind.MethodContext || frames[1].Method != unwind.MethodDWARF {
		return false
	}
	leaf := frames[0].Map
	return leaf != nil && leaf.Module != nil && leaf.Module.File != nil && leaf.Module.File.SFrame == nil
}

// cfiSame reports whether a walk of the default chain is also the
// CFI-only walk: every caller frame was found by CFI, and the walk ended
// where CFI marks the return address undefined, in an object without an
// SFrame section (so the SFrame stepper, tried first, had no say in it).
func cfiSame(frames []unwind.Frame, end unwind.EndReason) bool {
	if end != unwind.EndRAUndefined || len(frames) == 0 || frames[0].Method != unwind.MethodContext {
		return false
	}
	for i := 1; i < len(frames); i++ {
		if frames[i].Method != unwind.MethodDWARF {
			return false
		}
	}
	last := frames[len(frames)-1].Map
	return last != nil && last.Module != nil && last.Module.File != nil && last.Module.File.SFrame == nil
}
