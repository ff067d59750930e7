package cpython

import (
	"encoding/binary"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rewindstack/rewind/target"
)

// Bounds on what a walk reads, so that a damaged or hostile process can
// neither hang the reader nor exhaust its memory.
const (
	maxInterps = 64
	maxThreads = 1 << 16
	maxFrames  = 1 << 14 // per thread; CPython's recursion limit is 1000 by default
	maxTotal   = 1 << 20 // frames of all threads
	// maxString is the most characters of a name or file name: a str
	// claiming more is no name (CPython's own are far shorter), and is
	// not read.
	maxString = 1024
	// maxLinetable is the most bytes of a location table read; a
	// table's claim is also held to maxEntry bytes a code unit, since
	// each entry covers at least one unit and the longest entry is a
	// first byte and four varints of at most 6 bytes. A table claiming
	// more is cut (read only as far as the bound), with a note.
	maxLinetable = 64 << 10
	maxEntry     = 25
	// maxRead is the most bytes of one read from the target (the
	// largest is a location table); maxBudget the most bytes one walk
	// reads in all, after which it stops with a note (Stacks.Notes).
	// Frames of 80 bytes leave room for 800,000 of them.
	maxRead   = 64 << 10
	maxBudget = 64 << 20
	// maxNotes bounds Stacks.Notes; the notes past it are counted.
	maxNotes = 16
)

// InvalidName is what text outputs show for a function whose name in the
// target is not a printable str (see Frame.Function); JSON has null.
const InvalidName = target.InvalidName

// maxWalkTime bounds one walk of the chains in time.
const maxWalkTime = 2 * time.Second

// walkTime is the bound a walk starts with: maxWalkTime, longer in the
// tests of other bounds, so that a loaded machine does not cut them.
var walkTime = maxWalkTime

// errWalkTime is the error of a read after maxWalkTime.
var errWalkTime = fmt.Errorf("the walk has run for %v: it is cut", maxWalkTime)

// errBudget is the error of a read past the walk's budget.
var errBudget = fmt.Errorf("more than %d MiB read from the process: the walk's budget is spent", maxBudget>>20)

// Frame is one Python frame.
type Frame struct {
	// Function is the code object's co_qualname, File its co_filename;
	// either is "" when the object is not a str of at most maxString
	// characters, valid and without control characters (memory the
	// target may have written anything into is never shown as a name).
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
	// Notes say what the walk cut that no thread's End says: location
	// tables longer than their code could need, read in part; the read
	// budget spent, the walk stopped. At most maxNotes, and a count of
	// the rest.
	Notes []string
}

// Read walks every interpreter's thread states and their frame chains in
// mem. An error means the runtime's interpreter or thread lists could
// not be read; a thread's chain that cannot be followed to its end is
// cut (Thread.End), its frames so far kept.
func (rt *Runtime) Read(mem target.Memory) (*Stacks, error) {
	s, _, err := rt.read(mem, nil)
	return s, err
}

// read is Read, reusing the code objects of known (the same dump's
// earlier walk) whose identifying fields are still the same; it returns
// the code objects it read, for the next.
func (rt *Runtime) read(mem target.Memory, known map[uint64]*code) (*Stacks, map[uint64]*code, error) {
	w := newWalker(&rt.l, mem)
	w.known = known
	s, err := w.read(rt.Addr)
	if s != nil {
		s.Notes = w.notes
		if w.moreNotes > 0 {
			s.Notes = append(s.Notes, fmt.Sprintf("and %d more notes", w.moreNotes))
		}
	}
	return s, w.codes, err
}

func newWalker(l *layout, mem target.Memory) walker {
	return walker{l: l, mem: mem, codes: map[uint64]*code{}, types: map[uint64]string{}, budget: maxBudget,
		deadline: time.Now().Add(walkTime)}
}

// walker is one walk's reader, with the code objects and types it has
// read.
type walker struct {
	l     *layout
	mem   target.Memory
	codes map[uint64]*code
	known map[uint64]*code  // of an earlier walk: reused when the same
	types map[uint64]string // type object → its tp_name's first bytes
	buf   []byte
	// spent is the bytes read so far, budget the most that may be; over
	// says a read was refused for it.
	spent, budget int
	over          bool
	// deadline ends a walk that has run for maxWalkTime (checked every
	// 256 reads): a process's memory can hold chains that cost time
	// without costing bytes.
	deadline  time.Time
	gets      int
	notes     []string
	moreNotes int
	total     int // frames read, all threads
	seen      map[uint64]bool
	hdr       []byte
}

// code is what is kept of a code object.
type code struct {
	id             codeID
	qualname, file string
	lines          *lineIndex
	firstLine      int
	units          uint64 // address of the first code unit
	firstTraceable int
	err            error
}

// codeID is what identifies a code object at an address: its type, size
// and the objects it names (the rest of it, reference counts and caches,
// changes while it runs). Another code object at the address, or this
// one with another table, differs in one of them.
type codeID struct {
	typ, units, qualname, file, linetable uint64
	firstLine                             uint32
}

// note adds a note, past maxNotes only counting it.
func (w *walker) note(format string, args ...any) {
	if len(w.notes) >= maxNotes {
		w.moreNotes++
		return
	}
	w.notes = append(w.notes, fmt.Sprintf(format, args...))
}

// get reads p at addr from the target, within the walk's budget and
// maxRead.
func (w *walker) get(addr uint64, p []byte) error {
	if len(p) > maxRead {
		return fmt.Errorf("%d bytes at %#x: more than the %d one read may take", len(p), addr, maxRead)
	}
	if w.spent+len(p) > w.budget {
		if !w.over {
			w.over = true
			w.note("stopped at %#x: %v (the threads and frames after it are not read)", addr, errBudget)
		}
		return errBudget
	}
	if w.gets++; w.gets%256 == 0 && !w.deadline.IsZero() && time.Now().After(w.deadline) {
		w.budget = w.spent // every later read is refused, with the note above
		if !w.over {
			w.over = true
			w.note("stopped at %#x: the walk has run for %v (the threads and frames after it are not read)", addr, maxWalkTime)
		}
		return errWalkTime
	}
	w.spent += len(p)
	return w.mem.ReadMemory(addr, p)
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
			if w.over {
				if err == nil {
					s.Threads = append(s.Threads, th)
				}
				return s, nil // the note says why
			}
			if err != nil {
				return s, err
			}
			s.Threads = append(s.Threads, th)
			ts = next
		}
		if interp, err = w.ptr(interp + l.interpNext); w.over {
			return s, nil
		} else if err != nil {
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
		if err := w.get(frame, hdr); err != nil {
			th.End, th.Detail = "unreadable", fmt.Sprintf("frame at %#x: %v", frame, err)
			if w.over {
				th.End = "budget"
			}
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
			if w.over {
				th.End = "budget"
			}
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
				line = co.lines.line(int(unit))
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
	if err := w.get(addr, b); err != nil {
		return fmt.Errorf("code object at %#x: %w", addr, err)
	}
	c.id = codeID{typ: le64(b, l.obType), units: le64(b, l.bytesSize), qualname: le64(b, l.codeQualname),
		file: le64(b, l.codeFile), linetable: le64(b, l.codeLinetable), firstLine: binary.LittleEndian.Uint32(b[l.codeFirstLine:])}
	if k := w.known[addr]; k != nil && k.err == nil && k.id == c.id {
		*c = *k // the same object as the earlier walk read: its table is not read again
		return nil
	}
	if ok, err := w.isType(c.id.typ, "code"); !ok {
		if err == nil {
			err = fmt.Errorf("object at %#x is not a code object", addr)
		}
		return err
	}
	// A name that is not one is no reason to lose the frame: it is
	// left out, the walk goes on.
	c.qualname = w.name(c.id.qualname)
	c.file = w.name(c.id.file)
	c.firstLine = int(int32(c.id.firstLine))
	table, err := w.linetable(addr, c.id.linetable, c.id.units)
	if err != nil {
		return fmt.Errorf("co_linetable of code object at %#x: %w", addr, err)
	}
	c.lines = newLineIndex(table, c.firstLine)
	c.units = addr + l.codeAdaptive
	c.firstTraceable = -1
	if l.codeFirstTraceable >= 0 {
		c.firstTraceable = int(int32(binary.LittleEndian.Uint32(b[l.codeFirstTraceable:])))
	}
	return nil
}

// isType reports whether typ is the type named name (by its tp_name),
// reading each type object once.
func (w *walker) isType(typ uint64, name string) (bool, error) {
	got, seen := w.types[typ]
	if !seen {
		p, err := w.ptr(typ + w.l.tpName)
		if err != nil {
			return false, fmt.Errorf("type object at %#x: %w", typ, err)
		}
		b := make([]byte, 5) // "code" and its NUL: the longest name asked
		if err := w.get(p, b); err != nil {
			return false, fmt.Errorf("tp_name of type object at %#x: %w", typ, err)
		}
		got = string(b)
		w.types[typ] = got
	}
	return strings.HasPrefix(got, name+"\x00"), nil
}

// name reads the str object at addr as a name to print, "" when it is not
// one: not of the str type, of an unknown kind, longer than maxString
// characters, not valid characters, or holding control or format ones
// (terminal escapes, bidirectional overrides, NULs).
func (w *walker) name(addr uint64) string {
	l := w.l
	b := make([]byte, l.compactSize+8)
	if err := w.get(addr, b); err != nil {
		return ""
	}
	if ok, _ := w.isType(le64(b, l.obType), "str"); !ok {
		return ""
	}
	n := le64(b, l.uniLength)
	state := binary.LittleEndian.Uint32(b[l.uniState:])
	kind := uint64(state >> 2 & 7)
	compact, ascii := state>>5&1 != 0, state>>6&1 != 0
	if kind != 1 && kind != 2 && kind != 4 || ascii && kind != 1 || n > maxString {
		return ""
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
	if err := w.get(data, raw); err != nil {
		return ""
	}
	r := make([]rune, n)
	for i := range r {
		switch kind {
		case 1:
			r[i] = rune(raw[i])
			if ascii && r[i] >= 0x80 {
				return ""
			}
		case 2:
			r[i] = rune(binary.LittleEndian.Uint16(raw[2*i:]))
		default:
			r[i] = rune(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		if !printable(r[i]) {
			return ""
		}
	}
	return string(r)
}

// printable reports whether r may be shown in a name: a valid character
// (no surrogate, none past U+10FFFF), neither control nor format.
func printable(r rune) bool {
	return utf8.ValidRune(r) && !unicode.Is(unicode.Cc, r) && !unicode.Is(unicode.Cf, r)
}

// linetable reads the location table, a bytes object at addr, of the
// code object at co, which has units code units. A table claiming more
// than such code could need, or than maxLinetable, is read only that
// far, and noted: the frames past its end get no line.
func (w *walker) linetable(co, addr, units uint64) ([]byte, error) {
	h := make([]byte, 8)
	if err := w.get(addr+w.l.bytesSize, h); err != nil {
		return nil, fmt.Errorf("bytes at %#x: %w", addr, err)
	}
	n := le64(h, 0)
	limit := uint64(maxLinetable)
	if units < limit/maxEntry {
		limit = units * maxEntry
	}
	if n > limit {
		w.note("co_linetable of code object at %#x claims %d bytes for %d code units: read the first %d", co, n, units, limit)
		n = limit
	}
	b := make([]byte, n)
	if err := w.get(addr+w.l.bytesData, b); err != nil {
		return nil, fmt.Errorf("bytes at %#x: %w", addr, err)
	}
	return b, nil
}

func (w *walker) ptr(addr uint64) (uint64, error) {
	if cap(w.buf) < 8 {
		w.buf = make([]byte, 8)
	}
	b := w.buf[:8]
	if err := w.get(addr, b); err != nil {
		return 0, err
	}
	return le64(b, 0), nil
}

func le64(b []byte, off uint64) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
