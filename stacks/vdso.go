package stacks

import (
	"bytes"
	"fmt"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/unwind"
)

// maxVDSO bounds the vDSO image read from a target (Linux's is 2 pages on
// amd64, a few more on arm64).
const maxVDSO = 1 << 20

// VDSOMapping reads the vDSO's ELF image, mapped at [start, end) in the
// target, from its memory and returns a mapping for it, so frames in the
// vDSO (clock_gettime, gettimeofday, the arm64 signal trampoline) unwind
// by its CFI and get names. Images are shared through objs by build-id.
func VDSOMapping(mem unwind.Memory, start, end uint64, objs *unwind.Objects) (unwind.Mapping, error) {
	m := unwind.Mapping{Start: start, End: end, Path: "[vdso]"}
	if end <= start || end-start > maxVDSO {
		return m, fmt.Errorf("[vdso] at %#x-%#x: implausible size", start, end)
	}
	img := make([]byte, end-start)
	if err := mem.ReadMemory(start, img); err != nil {
		return m, fmt.Errorf("[vdso]: %w", err)
	}
	f, err := elfobj.NewFile(bytes.NewReader(img), "[vdso]")
	if err != nil {
		return m, err
	}
	bias, err := f.Bias(start, 0)
	if err != nil {
		return m, err
	}
	m.Module = objs.AddFile("[vdso]:"+f.BuildIDHex(), f)
	m.Bias = bias
	return m, nil
}
