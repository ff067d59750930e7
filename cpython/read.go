package cpython

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"

	"github.com/rewindstack/rewind/target"
)

// Bounds on what a walk reads, so that a damaged or hostile process can
// neither hang the reader nor exhaust its memory.
const (
	maxInterps   = 64
	maxThreads   = 1 << 16
	maxFrames    = 1 << 14 // per thread; CPython's recursion limit is 1000 by default
	maxTotal     = 1 << 20 // frames of all threads
	maxString    = 4096    // characters of a name or file kept
	maxLinetable = 1 << 20
)

// Frame is one Python frame.
type Frame struct {
	// Function is the code object's co_qualname, File its co_filename.
	Function, File string
	// Line is the current line; -1 when the instruction has none.
	Line int
	// Activation counts the evaluation-loop activations
	// (_PyEval_EvalFrameDefault calls) between the thread's innermost one
	// and the one running this frame: 0 for the innermost.
	Activation int
	// Anchor is the address of the activation's entry frame, which the
	// evaluation loop keeps on the C stack (3.12+), 0 when unknown: the
	// native frame whose stack holds it is the activation's.
	Anchor uint64
}

// Thread is the Python stack of one thread state.
type Thread struct {
	// TID is the native thread id (the kernel's).
	TID int
	// Frames are innermost first.
	Frames []Frame
	// End is "" when the chain was followed to its end, else why it was
	// cut ("loop", "unreadable", "not-code", "depth-limit"), Detail
	// saying where.
	End, Detail string
}

// Stacks are the Python stacks of every thread state of a process.
type Stacks struct {
	Threads []Thread
}

// Read walks every interpreter's thread states and their frame chains in
// mem. An error means the runtime's interpreter or thread lists could
// not be read; a thread's chain that cannot be followed to its end is
// cut (Thread.End), its frames so far kept.
func (rt *Runtime) Read(mem target.Memory) (*Stacks, error) {
	w := walker{l: &rt.l, mem: mem, codes: map[uint64]*code{}, types: map[uint64]bool{}}
	return w.read(rt.Addr)
}

// walker is one walk's reader, with the code objects and types it has
// read.
type walker struct {
	l     *layout
	mem   target.Memory
	codes map[uint64]*code
	types map[uint64]bool // type object → is it "code"
	buf   []byte
	total int // frames read, all threads
	seen  map[uint64]bool
	hdr   []byte
}

// code is what is kept of a code object.
type code struct {
	qualname, file string
	linetable      []byte
	firstLine      int
	units          uint64 // address of the first code unit
	firstTraceable int
	err            error
}

func (w *walker) read(runtime uint64) (*Stacks, error) {
	l := w.l
	s := &Stacks{}
	interp, err := w.ptr(runtime + l.runtimeInterps)
	if err != nil {
		return nil, fmt.Errorf("_PyRuntime.interpreters.head: %w", err)
	}
	seenTS := map[uint64]bool{}
	for n := 0; interp != 0 && n < maxInterps; n++ {
		ts, err := w.ptr(interp + l.interpThreads)
		if err != nil {
			return s, fmt.Errorf("interpreter state at %#x: %w", interp, err)
		}
		for ts != 0 && !seenTS[ts] && len(seenTS) < maxThreads {
			seenTS[ts] = true
			th, next, err := w.thread(ts)
			if err != nil {
				return s, err
			}
			s.Threads = append(s.Threads, th)
			ts = next
		}
		if interp, err = w.ptr(interp + l.interpNext); err != nil {
			return s, fmt.Errorf("interpreter state at %#x: %w", interp, err)
		}
	}
	return s, nil
}

// thread reads the thread state at ts and its frames; next is the next
// thread state.
func (w *walker) thread(ts uint64) (th Thread, next uint64, err error) {
	l := w.l
	next, err = w.ptr(ts + l.tsNext)
	if err == nil {
		var tid uint64
		tid, err = w.ptr(ts + l.tsNativeTID)
		th.TID = int(int32(tid))
	}
	var frame uint64
	if err == nil {
		frame, err = w.ptr(ts + l.tsFrame)
	}
	if err == nil && l.viaCFrame && frame != 0 {
		frame, err = w.ptr(frame + l.cframeCurrent)
	}
	if err != nil {
		return th, 0, fmt.Errorf("thread state at %#x: %w", ts, err)
	}
	w.frames(&th, frame)
	return th, next, nil
}

// frames follows the chain from frame into th.
func (w *walker) frames(th *Thread, frame uint64) {
	l := w.l
	if w.seen == nil {
		w.seen = map[uint64]bool{}
		w.hdr = make([]byte, l.frameSize)
	}
	clear(w.seen)
	seen, hdr := w.seen, w.hdr
	act := 0
	for frame != 0 {
		if seen[frame] {
			th.End, th.Detail = "loop", fmt.Sprintf("frame %#x comes back", frame)
			return
		}
		if len(seen) >= maxFrames || w.total >= maxTotal {
			th.End, th.Detail = "depth-limit", fmt.Sprintf("more than %d frames (%d in all threads)", maxFrames, maxTotal)
			return
		}
		w.total++
		seen[frame] = true
		if err := w.mem.ReadMemory(frame, hdr); err != nil {
			th.End, th.Detail = "unreadable", fmt.Sprintf("frame at %#x: %v", frame, err)
			return
		}
		prev := le64(hdr, l.framePrev)
		owner := hdr[l.frameOwner]
		if owner == l.ownerCStack || owner == l.ownerCStack2 {
			// The entry frame an activation pushes on the C stack
			// (3.12+): the frames after it are the next activation's.
			for i := len(th.Frames) - 1; i >= 0 && th.Frames[i].Activation == act; i-- {
				th.Frames[i].Anchor = frame
			}
			act++
			frame = prev
			continue
		}
		co, err := w.code(le64(hdr, l.frameCode) &^ 3) // 3.14's stack references are tagged
		if err != nil {
			th.End, th.Detail = "not-code", fmt.Sprintf("frame at %#x: %v", frame, err)
			return
		}
		instr := le64(hdr, l.frameInstr)
		unit := (int64(instr) - int64(co.units)) / 2
		// A frame before its code's first traceable instruction is
		// incomplete (just pushed): CPython shows no such frame.
		complete := owner == l.ownerGenerator || co.firstTraceable < 0 || unit >= int64(co.firstTraceable)
		if complete {
			line := co.firstLine
			if unit >= 0 && unit < 1<<31 {
				line = Line(co.linetable, co.firstLine, int(unit))
			}
			th.Frames = append(th.Frames, Frame{Function: co.qualname, File: co.file, Line: line, Activation: act})
		}
		if l.frameIsEntry >= 0 && hdr[l.frameIsEntry] != 0 {
			act++ // 3.11: this frame entered the activation
		}
		frame = prev
	}
}

// code reads (once) the code object at addr.
func (w *walker) code(addr uint64) (*code, error) {
	if c, ok := w.codes[addr]; ok {
		return c, c.err
	}
	c := &code{}
	w.codes[addr] = c
	c.err = w.readCode(c, addr)
	return c, c.err
}

func (w *walker) readCode(c *code, addr uint64) error {
	l := w.l
	b := make([]byte, l.codeSize)
	if addr == 0 {
		return fmt.Errorf("no code object")
	}
	if err := w.mem.ReadMemory(addr, b); err != nil {
		return fmt.Errorf("code object at %#x: %w", addr, err)
	}
	if ok, err := w.isCode(le64(b, l.obType)); !ok {
		if err == nil {
			err = fmt.Errorf("object at %#x is not a code object", addr)
		}
		return err
	}
	var err error
	if c.qualname, err = w.str(le64(b, l.codeQualname)); err != nil {
		return fmt.Errorf("co_qualname of code object at %#x: %w", addr, err)
	}
	if c.file, err = w.str(le64(b, l.codeFile)); err != nil {
		return fmt.Errorf("co_filename of code object at %#x: %w", addr, err)
	}
	if c.linetable, err = w.bytes(le64(b, l.codeLinetable)); err != nil {
		return fmt.Errorf("co_linetable of code object at %#x: %w", addr, err)
	}
	c.firstLine = int(int32(binary.LittleEndian.Uint32(b[l.codeFirstLine:])))
	c.units = addr + l.codeAdaptive
	c.firstTraceable = -1
	if l.codeFirstTraceable >= 0 {
		c.firstTraceable = int(int32(binary.LittleEndian.Uint32(b[l.codeFirstTraceable:])))
	}
	return nil
}

// isCode reports whether typ is the code type, by its tp_name.
func (w *walker) isCode(typ uint64) (bool, error) {
	if ok, seen := w.types[typ]; seen {
		return ok, nil
	}
	name, err := w.ptr(typ + w.l.tpName)
	if err != nil {
		return false, fmt.Errorf("type object at %#x: %w", typ, err)
	}
	b := make([]byte, 5)
	if err := w.mem.ReadMemory(name, b); err != nil {
		return false, fmt.Errorf("tp_name of type object at %#x: %w", typ, err)
	}
	ok := string(b) == "code\x00"
	w.types[typ] = ok
	return ok, nil
}

// str reads the str object at addr: compact ASCII, or compact or not
// with 1, 2 or 4 bytes a character (PyUnicode_KIND).
func (w *walker) str(addr uint64) (string, error) {
	l := w.l
	b := make([]byte, l.compactSize+8)
	if err := w.mem.ReadMemory(addr, b); err != nil {
		return "", fmt.Errorf("str at %#x: %w", addr, err)
	}
	n := le64(b, l.uniLength)
	state := binary.LittleEndian.Uint32(b[l.uniState:])
	kind := uint64(state >> 2 & 7)
	compact, ascii := state>>5&1 != 0, state>>6&1 != 0
	if kind != 1 && kind != 2 && kind != 4 {
		return "", fmt.Errorf("str at %#x has kind %d", addr, kind)
	}
	if n > maxString {
		n = maxString
	}
	var data uint64
	switch {
	case compact && ascii:
		data = addr + l.asciiSize
	case compact:
		data = addr + l.compactSize
	default:
		data = le64(b, l.compactSize) // PyUnicodeObject.data.any
	}
	raw := make([]byte, n*kind)
	if err := w.mem.ReadMemory(data, raw); err != nil {
		return "", fmt.Errorf("characters of str at %#x: %w", addr, err)
	}
	if kind == 1 {
		if ascii {
			return string(raw), nil
		}
		r := make([]rune, n)
		for i, c := range raw {
			r[i] = rune(c)
		}
		return string(r), nil
	}
	r := make([]rune, 0, n)
	for i := uint64(0); i < n; i++ {
		var c rune
		if kind == 2 {
			c = rune(binary.LittleEndian.Uint16(raw[2*i:]))
		} else {
			c = rune(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		if !utf8.ValidRune(c) {
			c = utf8.RuneError
		}
		r = append(r, c)
	}
	return string(r), nil
}

// bytes reads the bytes object at addr (at most maxLinetable bytes).
func (w *walker) bytes(addr uint64) ([]byte, error) {
	h := make([]byte, 8)
	if err := w.mem.ReadMemory(addr+w.l.bytesSize, h); err != nil {
		return nil, fmt.Errorf("bytes at %#x: %w", addr, err)
	}
	n := le64(h, 0)
	if n > maxLinetable {
		return nil, fmt.Errorf("bytes at %#x has %d bytes", addr, n)
	}
	b := make([]byte, n)
	if err := w.mem.ReadMemory(addr+w.l.bytesData, b); err != nil {
		return nil, fmt.Errorf("bytes at %#x: %w", addr, err)
	}
	return b, nil
}

func (w *walker) ptr(addr uint64) (uint64, error) {
	if cap(w.buf) < 8 {
		w.buf = make([]byte, 8)
	}
	b := w.buf[:8]
	if err := w.mem.ReadMemory(addr, b); err != nil {
		return 0, err
	}
	return le64(b, 0), nil
}

func le64(b []byte, off uint64) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
