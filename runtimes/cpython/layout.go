package cpython

import (
	"encoding/binary"
	"fmt"
	"sync"
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

	// _frameowner values: a generator's frame, and the frames no code
	// shows that mark an activation's entry (0xff: none).
	ownerGenerator, ownerCStack, ownerCStack2 byte
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
	ownerGenerator: 1, ownerCStack: 0xff, ownerCStack2: 0xff,
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
	ownerGenerator: 1, ownerCStack: 3, ownerCStack2: 0xff,
}

// debugCookie starts _Py_DebugOffsets, the first member of _PyRuntime
// from 3.13 on.
const debugCookie = "xdebugpy"

// A schema is the order of _Py_DebugOffsets' members after the cookie,
// version and free_threaded words: structs of uint64 fields, each named
// "struct.field". The reader needs the offsets of a few fields; where
// they sit in _Py_DebugOffsets changes between minor versions.
type schema [][]string

func fields(st string, names ...string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = st + "." + n
	}
	return out
}

// The members of 3.13's _Py_DebugOffsets, and of 3.14's (two revisions
// of its header: the second adds the generation counters, tlbc_index and
// co_tlbc of the free-threaded build's per-thread bytecode). Only the
// members up to unicode_object matter. They are made on first use: their
// 150 names were most of the allocations of every rewind's start.
func makeSchemas() map[int][]schema {
	schema313 := schema{
		fields("runtime_state", "size", "finalizing", "interpreters_head"),
		fields("interpreter_state", "size", "id", "next", "threads_head", "gc", "imports_modules", "sysdict", "builtins",
			"ceval_gil", "gil_runtime_state", "gil_runtime_state_enabled", "gil_runtime_state_locked", "gil_runtime_state_holder"),
		fields("thread_state", "size", "prev", "next", "interp", "current_frame", "thread_id", "native_thread_id", "datastack_chunk", "status"),
		fields("interpreter_frame", "size", "previous", "executable", "instr_ptr", "localsplus", "owner"),
		fields("code_object", "size", "filename", "name", "qualname", "linetable", "firstlineno", "argcount",
			"localsplusnames", "localspluskinds", "co_code_adaptive"),
		fields("pyobject", "size", "ob_type"),
		fields("type_object", "size", "tp_name", "tp_repr", "tp_flags"),
		fields("tuple_object", "size", "ob_item", "ob_size"),
		fields("list_object", "size", "ob_item", "ob_size"),
		fields("dict_object", "size", "ma_keys", "ma_values"),
		fields("float_object", "size", "ob_fval"),
		fields("long_object", "size", "lv_tag", "ob_digit"),
		fields("bytes_object", "size", "ob_size", "ob_sval"),
		fields("unicode_object", "size", "state", "length", "asciiobject_size"),
	}
	schema314 := schema{
		schema313[0],
		fields("interpreter_state", "size", "id", "next", "threads_head", "threads_main", "gc", "imports_modules", "sysdict", "builtins",
			"ceval_gil", "gil_runtime_state", "gil_runtime_state_enabled", "gil_runtime_state_locked", "gil_runtime_state_holder"),
		schema313[2],
		fields("interpreter_frame", "size", "previous", "executable", "instr_ptr", "localsplus", "owner", "stackpointer"),
		schema313[4], schema313[5], schema313[6], schema313[7], schema313[8],
		fields("set_object", "size", "used", "table", "mask"),
		schema313[9], schema313[10], schema313[11], schema313[12], schema313[13],
	}
	schema314tlbc := schema{
		schema313[0],
		fields("interpreter_state", "size", "id", "next", "threads_head", "threads_main", "gc", "imports_modules", "sysdict", "builtins",
			"ceval_gil", "gil_runtime_state", "gil_runtime_state_enabled", "gil_runtime_state_locked", "gil_runtime_state_holder",
			"code_object_generation", "tlbc_generation"),
		schema313[2],
		fields("interpreter_frame", "size", "previous", "executable", "instr_ptr", "localsplus", "owner", "stackpointer", "tlbc_index"),
		fields("code_object", "size", "filename", "name", "qualname", "linetable", "firstlineno", "argcount",
			"localsplusnames", "localspluskinds", "co_code_adaptive", "co_tlbc"),
		schema313[5], schema313[6], schema313[7], schema313[8],
		fields("set_object", "size", "used", "table", "mask"),
		schema313[9], schema313[10], schema313[11], schema313[12], schema313[13],
	}
	return map[int][]schema{13: {schema313}, 14: {schema314tlbc, schema314}}
}

// schemas returns the candidates for each minor version.
var schemas = sync.OnceValue(makeSchemas)

// values reads b as sc says: field name → value; nil when b is too short.
func (sc schema) values(b []byte) map[string]uint64 {
	out := map[string]uint64{}
	off := 24
	for _, st := range sc {
		for _, f := range st {
			if off+8 > len(b) {
				return nil
			}
			out[f] = binary.LittleEndian.Uint64(b[off:])
			off += 8
		}
	}
	return out
}

// fits reports whether v has the values every 64-bit build with a GIL
// has: PyObject is 16 bytes with ob_type at 8, bytes' ob_size at 16 and
// ob_sval at 32, str's length at 16 and state at 32. Read with the wrong
// schema, these land on other members.
func fits(v map[string]uint64) bool {
	return v != nil && v["pyobject.size"] == 16 && v["pyobject.ob_type"] == 8 &&
		v["bytes_object.ob_size"] == 16 && v["bytes_object.ob_sval"] == 32 &&
		v["unicode_object.length"] == 16 && v["unicode_object.state"] == 32
}

// debugOffsetsSize is as much of _Py_DebugOffsets as any schema reads.
const debugOffsetsSize = 1024

// fromDebugOffsets builds the layout of a 3.13 or later runtime from its
// _Py_DebugOffsets (b, the start of _PyRuntime), after checking the
// cookie, the version (against want, the minor version its file name
// says), the build (not free-threaded) and that a known schema fits.
func fromDebugOffsets(b []byte, want int) (layout, error) {
	if len(b) < 24 || string(b[:8]) != debugCookie {
		return layout{}, fmt.Errorf("_PyRuntime does not start with the %q cookie of _Py_DebugOffsets", debugCookie)
	}
	hex := binary.LittleEndian.Uint64(b[8:])
	major, minor := int(hex>>24&0xff), int(hex>>16&0xff)
	if major != 3 || minor != want {
		return layout{}, fmt.Errorf("_Py_DebugOffsets says version %d.%d (%#x), the file name 3.%d", major, minor, hex, want)
	}
	if binary.LittleEndian.Uint64(b[16:]) != 0 {
		return layout{}, &UnsupportedError{Version: fmt.Sprintf("3.%dt", minor), Why: "free-threaded builds are not supported"}
	}
	var v map[string]uint64
	for _, sc := range schemas()[minor] {
		if w := sc.values(b); fits(w) {
			v = w
			break
		}
	}
	if v == nil {
		return layout{}, &UnsupportedError{Version: fmt.Sprintf("3.%d", minor), Why: "its _Py_DebugOffsets layout is not known to this rewind"}
	}
	l := layout{
		minor:          minor,
		runtimeInterps: v["runtime_state.interpreters_head"],
		interpNext:     v["interpreter_state.next"], interpThreads: v["interpreter_state.threads_head"],
		tsNext: v["thread_state.next"], tsFrame: v["thread_state.current_frame"], tsNativeTID: v["thread_state.native_thread_id"],
		framePrev: v["interpreter_frame.previous"], frameCode: v["interpreter_frame.executable"],
		frameInstr: v["interpreter_frame.instr_ptr"], frameOwner: v["interpreter_frame.owner"], frameIsEntry: -1,
		codeFile: v["code_object.filename"], codeQualname: v["code_object.qualname"], codeLinetable: v["code_object.linetable"],
		codeFirstLine: v["code_object.firstlineno"], codeAdaptive: v["code_object.co_code_adaptive"], codeFirstTraceable: -1,
		codeSize: v["code_object.size"],
		obType:   v["pyobject.ob_type"], tpName: v["type_object.tp_name"],
		bytesSize: v["bytes_object.ob_size"], bytesData: v["bytes_object.ob_sval"],
		uniState: v["unicode_object.state"], uniLength: v["unicode_object.length"], asciiSize: v["unicode_object.asciiobject_size"],
		ownerGenerator: 1, ownerCStack: 3, ownerCStack2: 0xff,
	}
	if minor == 13 && l.codeAdaptive == 200 && l.codeQualname == 128 {
		// _Py_DebugOffsets has no _co_firsttraceable; 3.13's headers put
		// it 16 bytes before co_code_adaptive.
		l.codeFirstTraceable = 184
	}
	if minor >= 14 {
		// 3.14: FRAME_OWNED_BY_INTERPRETER is 3 (an activation's entry
		// frame), FRAME_OWNED_BY_CSTACK 4.
		l.ownerCStack2 = 4
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
