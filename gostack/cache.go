//go:build amd64 || arm64

package gostack

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// fpunwindExpand is the runtime's own expansion of a frame-pointer stack
// into logical frames: src[0] is a number of logical frames to skip, src[1:]
// are return addresses; dst receives what runtime.Callers would have stored
// for those frames (inlined frames added, wrapper frames hidden). The runtime
// exports it for runtime/pprof with a push linkname, which is what makes this
// reference legal. See the package documentation.
//
//go:linkname fpunwindExpand runtime.pprof_fpunwindExpand
func fpunwindExpand(dst, src []uintptr) int

// Entry flags.
const (
	// flagIdentity: the return address expands to itself only (no inlined
	// frames, not a hidden wrapper). Entry.pcs is nil.
	flagIdentity uint32 = 1 << iota
	// flagInnermostHidden: the innermost logical frame at this return
	// address is a wrapper, hidden unless its callee panics (see
	// flagPanicCallee).
	flagInnermostHidden
	// flagPanicCallee: the physical function is runtime.gopanic or
	// runtime.panicwrap. The runtime shows a wrapper frame that calls one of
	// those (and runtime.sigpanic), so the next frame's innermost wrapper is
	// not hidden.
	flagPanicCallee
	// flagSigpanic: the physical function is runtime.sigpanic. The next
	// "return address" is the faulting PC itself.
	flagSigpanic
	// flagTop: the function is the top of a goroutine stack
	// (runtime.goexit); the runtime's unwinder stops after it.
	flagTop
	// flagUntrusted: Callers must not follow this frame's frame pointer and
	// falls back to runtime.Callers.
	flagUntrusted
)

// entry is the cached knowledge about one return address. Entries are
// immutable once published.
type entry struct {
	flags uint32
	// pcs are the logical PCs runtime.Callers stores for this return
	// address when the callee is not a panic function; nil for
	// flagIdentity entries.
	pcs []uintptr
}

// identityEntry stands for every return address whose flags are exactly
// flagIdentity (the common case: a physical frame without inlined frames in
// an ordinary function). Sharing it saves memory, and the walks recognise it
// by pointer without loading it.
var identityEntry = &entry{flags: flagIdentity}

// table is an open-addressing hash table from return address to *entry,
// with linear probing. keys[h] == 0 marks a free slot (0 is never cached).
// A slot is written once, under cacheMu: first vals[h], then keys[h], both
// with atomic stores, so a reader that loads keys[h] == pc (atomically) and
// then vals[h] sees the entry. Readers take no lock. When the table is 3/4
// full a new one twice as large replaces it; the old one stays valid for
// readers still holding it.
type table struct {
	shift uint // 64 - log2(len(keys))
	mask  uintptr
	keys  []uintptr
	vals  []unsafe.Pointer
	count int // guarded by cacheMu
}

var (
	cacheMu  sync.Mutex
	cacheTab atomic.Pointer[table]
	// cacheBytes is the memory held by entries and their PC slices
	// (table slots not included).
	cacheBytes atomic.Int64
)

const initialSlots = 1 << 8

func init() {
	cacheTab.Store(newTable(initialSlots))
}

func newTable(n int) *table {
	shift := uint(64)
	for s := n; s > 1; s >>= 1 {
		shift--
	}
	return &table{shift: shift, mask: uintptr(n - 1), keys: make([]uintptr, n), vals: make([]unsafe.Pointer, n)}
}

// hash spreads return addresses (which share their high bits) over the
// table: Fibonacci hashing, the top bits of pc times 2^64/phi.
func (t *table) hash(pc uintptr) uintptr {
	return uintptr(uint64(pc)*0x9E3779B97F4A7C15) >> t.shift
}

// lookup returns the entry for pc, or nil. It is small enough to be inlined
// into the walk loops.
func (t *table) lookup(pc uintptr) *entry {
	h := t.hash(pc)
	for {
		k := atomic.LoadUintptr(&t.keys[h])
		if k == pc {
			// For pc == 0 this is a free slot and vals[h] is nil.
			return (*entry)(atomic.LoadPointer(&t.vals[h]))
		}
		if k == 0 {
			return nil
		}
		h = (h + 1) & t.mask
	}
}

// insertLocked puts e under key pc into t; t must have a free slot and pc
// must not be 0.
func (t *table) insertLocked(pc uintptr, e *entry) {
	h := t.hash(pc)
	for atomic.LoadUintptr(&t.keys[h]) != 0 {
		h = (h + 1) & t.mask
	}
	atomic.StorePointer(&t.vals[h], unsafe.Pointer(e))
	atomic.StoreUintptr(&t.keys[h], pc)
	t.count++
}

// lookupOrFill returns the entry for pc, computing and caching it if needed.
func lookupOrFill(pc uintptr) *entry {
	if e := cacheTab.Load().lookup(pc); e != nil {
		return e
	}
	return fill(pc)
}

// testHookFill, when set by a test, runs at the start of every fill (the
// tests use it to move the stack in the middle of a walk).
var testHookFill func()

// fill computes the entry for pc and publishes it.
func fill(pc uintptr) *entry {
	if testHookFill != nil {
		testHookFill()
	}
	e := classify(pc)
	if pc == 0 {
		return e // 0 marks free slots: never cached
	}
	if e.flags == flagIdentity {
		e = identityEntry
	}
	cacheMu.Lock()
	defer cacheMu.Unlock()
	t := cacheTab.Load()
	if old := t.lookup(pc); old != nil {
		return old // another goroutine won
	}
	if (t.count+1)*4 > len(t.keys)*3 {
		nt := newTable(len(t.keys) * 2)
		for h, k := range t.keys {
			if k != 0 {
				nt.insertLocked(k, (*entry)(t.vals[h]))
			}
		}
		cacheTab.Store(nt)
		t = nt
	}
	t.insertLocked(pc, e)
	if e != identityEntry {
		size := int64(unsafe.Sizeof(entry{})) + int64(cap(e.pcs))*int64(ptrSize)
		cacheBytes.Add(size)
	}
	return e
}

// Physical functions that change how a stack must be read.
var (
	untrustedFuncs = map[string]bool{
		"runtime.sigpanic":      true,
		"runtime.asyncPreempt":  true,
		"runtime.asyncPreempt2": true,
		"runtime.debugCallV2":   true,
		"runtime.cgocallback":   true,
		"runtime.asmcgocall":    true,
		"runtime.systemstack":   true,
		"runtime.mcall":         true,
		"runtime.morestack":     true,
		"runtime.mstart":        true,
		"runtime.mstart0":       true,
		"runtime.rt0_go":        true,
		"runtime.gogo":          true,
	}
	panicCallees = map[string]bool{
		"runtime.gopanic":   true,
		"runtime.panicwrap": true,
		"runtime.sigpanic":  true,
	}
)

// classify computes the entry for the return address pc.
func classify(pc uintptr) *entry {
	e := &entry{}
	f := runtime.FuncForPC(pc - 1)
	if f == nil {
		// Not Go code: keep the PC as the runtime's expansion does, but do
		// not follow the frame pointer.
		e.flags = flagIdentity | flagUntrusted
		return e
	}
	name := f.Name()
	if phys := runtime.FuncForPC(f.Entry()); phys != nil {
		name = phys.Name()
	}
	if untrustedFuncs[name] || len(name) >= len("runtime.debugCall") && name[:len("runtime.debugCall")] == "runtime.debugCall" {
		e.flags |= flagUntrusted
	}
	if panicCallees[name] {
		e.flags |= flagPanicCallee
	}
	if name == "runtime.sigpanic" {
		e.flags |= flagSigpanic
	}
	if name == "runtime.goexit" {
		e.flags |= flagTop
	}

	var buf [32]uintptr
	dst := buf[:]
	src := [2]uintptr{0, pc}
	n := fpunwindExpand(dst, src[:])
	for n == len(dst) {
		// Deep inlining: retry with more room until it fits.
		dst = make([]uintptr, 2*len(dst))
		n = fpunwindExpand(dst, src[:])
	}
	if n == 0 || dst[0] != pc {
		e.flags |= flagInnermostHidden
	}
	if n == 1 && dst[0] == pc {
		e.flags |= flagIdentity
		return e
	}
	e.pcs = append([]uintptr(nil), dst[:n]...)
	return e
}

// CacheStats reports the size of the process-wide cache that maps return
// addresses to logical PCs: the number of return addresses cached and the
// bytes it holds (the hash table's slots, 16 bytes each, plus the entries of
// frames that are not ordinary and their PC lists, as Go sizes the structs,
// before allocator rounding).
func CacheStats() (entries int, bytes int64) {
	cacheMu.Lock()
	t := cacheTab.Load()
	entries = t.count
	cacheMu.Unlock()
	return entries, cacheBytes.Load() + int64(len(t.keys))*2*int64(ptrSize)
}
