package unwind

import (
	"github.com/rewindstack/rewind/internal/goruntime"
	"github.com/rewindstack/rewind/target"
)

// rootKind is what the walk knows of a frame's function.
type rootKind uint8

const (
	rootNone   rootKind = iota
	rootThread          // a thread's entry: step, but never past it
	rootGo              // a Go top frame: the walk ends here
)

// modInfo is what the walk derives from a module, once per module: the
// extents of its thread-root functions, its signal-trampoline cache, and
// whether it has SFrame information.
type modInfo struct {
	roots     []goruntime.RootRange
	sig       sigCache
	hasSFrame bool // the object has an .sframe section
	goSwitch  []goSwitchRange
}

var infoKey = target.NewMemoKey()

func newModInfo(m *target.Module) any {
	return &modInfo{roots: goruntime.RootRanges(m), hasSFrame: m.File != nil && m.File.SFrame != nil,
		goSwitch: goSwitchRanges(m)}
}

// Prepare computes ahead of any walk what walks derive from module m on
// first use: its unwind table and the extents of its thread-root
// functions. A dump calls it for each object mapped into a process while
// the process is being stopped, so that the walks find them ready.
func Prepare(m *target.Module) {
	if m == nil {
		return
	}
	_, _ = m.Table()
	m.Memo(infoKey, newModInfo)
}

// modCache remembers the last module a walk looked at and its modInfo:
// consecutive frames are mostly in the same object, so most frames cost
// one pointer comparison.
type modCache struct {
	mod  *target.Module
	info *modInfo
}

// get returns the module's modInfo, nil when m has no module.
func (mc *modCache) get(m *target.Mapping) *modInfo {
	if m == nil || m.Module == nil {
		return nil
	}
	if m.Module != mc.mod {
		mc.mod, mc.info = m.Module, m.Module.Memo(infoKey, newModInfo).(*modInfo)
	}
	return mc.info
}

// rootAt classifies the function holding lookup address pc of mapping m
// (whose modInfo is info), by the extents of the thread-root functions in
// its module's symbol tables; ret is the frame's PC as found (pc+1 for a
// return address).
func rootAt(info *modInfo, m *target.Mapping, pc, ret uint64) rootKind {
	if info == nil {
		return rootNone
	}
	vaddr := pc - m.Bias
	// A return address at the very start of __start_context or
	// make_fcontext is one a context switch library planted: nothing
	// called from there, and pc (ret-1) is in another function. At the
	// start of any other root (_start, say) it is a call to a function
	// that does not return at the very end of the function before it,
	// which is an ordinary frame.
	rvaddr := ret - m.Bias
	for _, r := range info.roots {
		if vaddr >= r.Start && vaddr < r.End || ret != pc && rvaddr == r.Start && r.Planted {
			if r.Kind == goruntime.GoTopFrame {
				return rootGo
			}
			return rootThread
		}
	}
	return rootNone
}
