package target

import (
	"bytes"
	"fmt"

	"github.com/rewindstack/rewind/elfobj"
)

// maxVDSO bounds the vDSO image read from a target (Linux's is 2 pages on
// amd64, a few more on arm64).
const maxVDSO = 1 << 20

// VDSOPath is the name the kernel gives the vDSO's mapping.
const VDSOPath = "[vdso]"

// ReadVDSO reads the vDSO's ELF image, mapped at [start, end) in the
// target, from its memory and returns its module, so frames in the vDSO
// (clock_gettime, gettimeofday, the arm64 signal trampoline) unwind by its
// CFI and get names. Images are shared through objs by build-id.
func ReadVDSO(mem Memory, start, end uint64, objs *Objects) (*Module, error) {
	if end <= start || end-start > maxVDSO {
		return nil, fmt.Errorf("[vdso] at %#x-%#x: implausible size", start, end)
	}
	img := make([]byte, end-start)
	if err := mem.ReadMemory(start, img); err != nil {
		return nil, fmt.Errorf("[vdso]: %w", err)
	}
	return VDSOImage(img, objs)
}

// VDSOImage returns the module of a vDSO image (read from a target's
// memory, or this process's own for perf samples, whose kernel is the
// same), shared through objs by build-id.
func VDSOImage(img []byte, objs *Objects) (*Module, error) {
	f, err := elfobj.NewFile(bytes.NewReader(img), VDSOPath)
	if err != nil {
		return nil, err
	}
	return objs.AddFile(VDSOPath+":"+f.BuildIDHex(), f), nil
}
