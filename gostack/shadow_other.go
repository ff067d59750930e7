//go:build rewind_shadow && !amd64 && !arm64

package gostack

import (
	"slices"
	"sync"
	"unsafe"
)

// ShadowCallers is [CallersFP] on this architecture: without frame pointers
// there is no shadow stack.
//
//go:noinline
func ShadowCallers(skip int, pcs []uintptr) int { return CallersFP(skip+1, pcs) }

// ShadowCallersEager is [CallersFP] on this architecture.
//
//go:noinline
func ShadowCallersEager(skip int, pcs []uintptr) int { return CallersFP(skip+1, pcs) }

// ShadowStackID returns an ID for the calling goroutine's stack as
// [CallersFP] captures it (see the amd64 and arm64 version's doc); here,
// without a shadow stack, the stack is walked whole each time.
//
//go:noinline
func ShadowStackID(skip int) uint64 {
	pcs := make([]uintptr, 64)
	for {
		n := CallersFP(skip+1, pcs)
		if n < len(pcs) {
			return stackIDs.id(pcs[:n])
		}
		pcs = make([]uintptr, 2*len(pcs))
	}
}

// StackPCs writes the return addresses of the stack with the given ID into
// pcs and returns how many it wrote; 0 for an ID ShadowStackID never
// returned.
func StackPCs(id uint64, pcs []uintptr) int {
	stackIDs.Lock()
	defer stackIDs.Unlock()
	if id == 0 || id > uint64(len(stackIDs.stacks)) {
		return 0
	}
	return copy(pcs, stackIDs.stacks[id-1])
}

// stackTable interns whole stacks for ShadowStackID.
type stackTable struct {
	sync.Mutex
	ids    map[string]uint64
	stacks [][]uintptr
}

var stackIDs stackTable

func (t *stackTable) id(pcs []uintptr) uint64 {
	if len(pcs) == 0 {
		return 0
	}
	key := string(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(pcs))), len(pcs)*int(unsafe.Sizeof(uintptr(0)))))
	t.Lock()
	defer t.Unlock()
	if id, ok := t.ids[key]; ok {
		return id
	}
	if t.ids == nil {
		t.ids = map[string]uint64{}
	}
	t.stacks = append(t.stacks, slices.Clone(pcs))
	id := uint64(len(t.stacks))
	t.ids[key] = id
	return id
}
