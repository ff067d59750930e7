package cpython

import (
	"encoding/binary"
	"fmt"
)

// layout is where the fields the reader needs lie in one CPython
// version's structures (byte offsets; 64-bit builds).
type layout struct {
	minor int

	runtimeInterps uint64 // _PyRuntimeState.interpreters.head

	interpNext, interpThreads uint64 // PyInterpreterState.next, threads.head

	tsNext, tsNativeTID uint64 // PyThreadState.next, native_thread_id
	// tsFrame is PyThreadState.current_frame (3.13+), or PyThreadState.cframe
	// (3.11, 3.12), whose current_frame is at cframeCurrent.
	tsFrame       uint64
	viaCFrame     bool
	cframeCurrent uint64

	// _PyInterpreterFrame: previous, f_code (f_executable from 3.13),
	// prev_instr (instr_ptr from 3.13), owner, and is_entry (3.11; -1
	// otherwise). frameSize covers them all.
	framePrev, frameCode, frameInstr, frameOwner uint64
	frameIsEntry                                 int
	frameSize                                    uint64

	// PyCodeObject: co_filename, co_qualname, co_linetable,
	// co_firstlineno (an int), _co_firsttraceable (an int; -1 when the
	// layout does not give it), co_code_adaptive (the code units).
	codeFile, codeQualname, codeLinetable, codeFirstLine, codeAdaptive uint64
	codeFirstTraceable                                                 int
	codeSize                                                           uint64

	obType, tpName uint64 // PyObject.ob_type, PyTypeObject.tp_name

	uniState, uniLength    uint64 // PyASCIIObject.state, length
	asciiSize, compactSize uint64 // sizeof PyASCIIObject, PyCompactUnicodeObject

	bytesSize, bytesData uint64 // PyBytesObject.ob_size, ob_sval

	ownerGenerator, ownerCStack byte // _frameowner values (ownerCStack 0xff: none)
}

// layout311 and layout312 are taken from those versions' headers
// (offsetof over Include/internal/pycore_*.h of 3.11.2, 3.11.7 and 3.12.1,
// which agree within a version: the layout is part of a version's ABI).
var layout311 = layout{
	minor:          11,
	runtimeInterps: 40, interpNext: 0, interpThreads: 16,
	tsNext: 8, tsNativeTID: 160, tsFrame: 56, viaCFrame: true, cframeCurrent: 8,
	framePrev: 48, frameCode: 32, frameInstr: 56, frameOwner: 69, frameIsEntry: 68, frameSize: 80,
	codeFile: 112, codeQualname: 128, codeLinetable: 136, codeFirstLine: 72, codeAdaptive: 184, codeFirstTraceable: 168, codeSize: 192,
	obType: 8, tpName: 24,
	uniState: 32, uniLength: 16, asciiSize: 48, compactSize: 72,
	bytesSize: 16, bytesData: 32,
	ownerGenerator: 1, ownerCStack: 0xff,
}

var layout312 = layout{
	minor:          12,
	runtimeInterps: 40, interpNext: 0, interpThreads: 72,
	tsNext: 8, tsNativeTID: 144, tsFrame: 56, viaCFrame: true, cframeCurrent: 0,
	framePrev: 8, frameCode: 0, frameInstr: 56, frameOwner: 70, frameIsEntry: -1, frameSize: 80,
	codeFile: 112, codeQualname: 128, codeLinetable: 136, codeFirstLine: 68, codeAdaptive: 192, codeFirstTraceable: 176, codeSize: 200,
	obType: 8, tpName: 24,
	uniState: 32, uniLength: 16, asciiSize: 40, compactSize: 56,
	bytesSize: 16, bytesData: 32,
	ownerGenerator: 1, ownerCStack: 3,
}

// debugCookie starts _Py_DebugOffsets, the first member of _PyRuntime
// from 3.13 on.
const debugCookie = "xdebugpy"

// debugOffsetsSize313 is the size of 3.13's _Py_DebugOffsets: 73
// uint64s.
const debugOffsetsSize313 = 584

// fromDebugOffsets builds the layout of a 3.13 runtime from its
// _Py_DebugOffsets (b, debugOffsetsSize313 bytes), after checking the
// cookie, the version (against want, the minor version its file name
// says) and the build (not free-threaded).
func fromDebugOffsets(b []byte, want int) (layout, error) {
	if len(b) < debugOffsetsSize313 || string(b[:8]) != debugCookie {
		return layout{}, fmt.Errorf("_PyRuntime does not start with the %q cookie of _Py_DebugOffsets", debugCookie)
	}
	u := func(off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
	hex := u(8)
	major, minor := int(hex>>24&0xff), int(hex>>16&0xff)
	if major != 3 || minor != want {
		return layout{}, fmt.Errorf("_Py_DebugOffsets says version %d.%d (%#x), the file name 3.%d", major, minor, hex, want)
	}
	if minor != 13 {
		return layout{}, &UnsupportedError{Version: fmt.Sprintf("3.%d", minor), Why: "its _Py_DebugOffsets layout is not known to this rewind"}
	}
	if u(16) != 0 {
		return layout{}, &UnsupportedError{Version: "3.13t", Why: "free-threaded builds are not supported"}
	}
	l := layout{
		minor:          13,
		runtimeInterps: u(40),
		interpNext:     u(64), interpThreads: u(72),
		tsNext: u(168), tsFrame: u(184), tsNativeTID: u(200),
		framePrev: u(232), frameCode: u(240), frameInstr: u(248), frameOwner: u(264), frameIsEntry: -1,
		codeFile: u(280), codeQualname: u(296), codeLinetable: u(304), codeFirstLine: u(312), codeAdaptive: u(344), codeFirstTraceable: -1,
		codeSize: u(272),
		obType:   u(360), tpName: u(376),
		bytesSize: u(520), bytesData: u(528),
		uniState: u(544), uniLength: u(552), asciiSize: u(560),
		ownerGenerator: 1, ownerCStack: 3,
	}
	// PyCompactUnicodeObject is PyASCIIObject, utf8_length and utf8.
	l.compactSize = l.asciiSize + 16
	l.frameSize = max(l.framePrev, l.frameCode, l.frameInstr, l.frameOwner) + 8
	if err := l.check(); err != nil {
		return layout{}, err
	}
	return l, nil
}

// check refuses offsets no real build has (a damaged or foreign
// _Py_DebugOffsets): every offset the reader uses must lie within a few
// kilobytes of its structure's start.
func (l *layout) check() error {
	for _, o := range []uint64{l.runtimeInterps, l.interpNext, l.interpThreads, l.tsNext, l.tsFrame, l.tsNativeTID,
		l.framePrev, l.frameCode, l.frameInstr, l.frameOwner, l.codeFile, l.codeQualname, l.codeLinetable,
		l.codeFirstLine, l.codeAdaptive, l.obType, l.tpName, l.bytesSize, l.bytesData, l.uniState, l.uniLength, l.asciiSize} {
		if o > 1<<16 {
			return fmt.Errorf("_Py_DebugOffsets holds an implausible offset %#x", o)
		}
	}
	if l.codeSize > 1<<12 || max(l.codeFile, l.codeQualname, l.codeLinetable, l.obType)+8 > l.codeSize || l.codeFirstLine+4 > l.codeSize {
		return fmt.Errorf("_Py_DebugOffsets holds an implausible code object size %d", l.codeSize)
	}
	if max(l.uniLength, l.uniState) > l.asciiSize {
		return fmt.Errorf("_Py_DebugOffsets holds an implausible str object size %d", l.asciiSize)
	}
	return nil
}

// UnsupportedError says that a process runs a CPython this package cannot
// read (a version or build it does not know): its native frames are
// still right, its Python frames are left out.
type UnsupportedError struct {
	Version string // "3.14", "3.13t"
	Why     string
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("CPython %s: %s; Python frames left out", e.Version, e.Why)
}
