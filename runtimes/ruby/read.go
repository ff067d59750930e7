package ruby

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rewindstack/rewind/target"
)

// Bounds on what a walk reads, so that a damaged or hostile process can
// neither hang the reader nor exhaust its memory.
const (
	maxThreads = 1 << 14
	// maxFrames is the most control frames read of a thread: Ruby's
	// default VM stack (1 MiB) holds at most 16384 of 64 bytes.
	maxFrames = 1 << 14
	maxTotal  = 1 << 20 // frames of all threads
	// maxString is the most bytes of a label or path shown.
	maxString = 1024
	// maxBudget is the most bytes one walk reads (pages included).
	maxBudget = 64 << 20
	// maxNotes bounds Stacks.Notes.
	maxNotes = 16
	pageSize = 4096
)

// maxWalkTime bounds one walk in time.
const maxWalkTime = 2 * time.Second

// InvalidName is what text outputs show for a frame whose name in the
// target is not a printable string; JSON has null.
const InvalidName = target.InvalidName

// Frame is one Ruby frame as caller_locations shows it.
type Frame struct {
	// Label is the iseq's label ("block in rb_a", "<main>") or a C
	// method's name; "" when it is not a printable string.
	Label string
	// Path is the iseq's path (a C method's: its caller's).
	Path string
	// Line is the current line, 0 when unknown.
	Line int
	// CFunc says the frame is a C method's.
	CFunc bool
	// Activation counts the rb_vm_exec activations between the thread's
	// innermost one and the one running the frame.
	Activation int
}

// Thread is the Ruby stack of one Ruby thread.
type Thread struct {
	// Addr is the rb_thread_t.
	Addr uint64
	// TID is the kernel's thread id (0 when the VM keeps none), Pthread
	// the pthread_t (the thread's TCB, its fs base).
	TID     int
	Pthread uint64
	// Frames are innermost first.
	Frames []Frame
	// End is "" when the frames were read to the stack's base, else why
	// the walk stopped ("unreadable", "not-iseq", "bad-cfp",
	// "depth-limit", "budget"), Detail saying where.
	End, Detail string
}

// Stacks are the Ruby stacks of every thread of the main ractor.
type Stacks struct {
	Threads []Thread
	// Exec is the runtime's (Runtime.Exec).
	Exec target.PCRange
	// Notes say what the walk cut that no thread's End says.
	Notes []string
}

// cache keeps what a walk read that does not change while the process
// runs, for the next walk of the same process: iseqs' labels, paths
// and lines, C methods' names.
type cache struct {
	iseqs map[uint64]*iseqInfo // by iseq address
	lines map[[2]uint64]int    // (body, pc) → line
	ids   map[uint64]string    // ID → name ("" unknown)
}

func newCache() *cache {
	return &cache{iseqs: map[uint64]*iseqInfo{}, lines: map[[2]uint64]int{}, ids: map[uint64]string{}}
}

// iseqInfo is what is kept of an iseq.
type iseqInfo struct {
	flags, body   uint64 // the iseq's header: a different iseq differs
	label, path   string
	encoded, size uint64 // iseq_encoded, iseq_size
	insns, pos    uint64 // insns_info.body, .positions
	succ          uint64 // insns_info.succ_index_table
	n             uint64 // insns_info.size
}

// Read walks every thread of the VM's main ractor in mem. An error
// means the VM or its thread list could not be read; a thread whose
// frames cannot be read to the end is cut (Thread.End).
func (rt *Runtime) Read(mem target.Memory) (*Stacks, error) {
	s, _, err := rt.read(mem, newCache(), readOpts{})
	return s, err
}

// readOpts are the options of a walk beyond Read's.
type readOpts struct {
	// pages are pages already read (nil: none); the walk adds those it
	// reads.
	pages map[uint64][]byte
	// expired, when not nil, ends the walk once it reports true.
	expired func() bool
	// touched, when not nil, gets every page the walk reads from.
	touched map[uint64]bool
}

// read is Read with a cache of earlier walks and opt; it returns the
// pages it read.
func (rt *Runtime) read(mem target.Memory, c *cache, opt readOpts) (*Stacks, map[uint64][]byte, error) {
	if opt.pages == nil {
		opt.pages = map[uint64][]byte{}
	}
	w := &walker{rt: rt, l: rt.l, mem: mem, c: c, pages: opt.pages, expired: opt.expired, touched: opt.touched,
		deadline: time.Now().Add(maxWalkTime)}
	s, err := w.walk()
	if s != nil {
		s.Notes = w.notes
		s.Exec = rt.Exec
	}
	return s, opt.pages, err
}

// walker is one walk's reader.
type walker struct {
	rt      *Runtime
	l       *layout
	mem     target.Memory
	c       *cache
	pages   map[uint64][]byte // nil: the page is not readable whole
	spare   []byte            // a page buffer a failed read left
	touched map[uint64]bool
	// lastBase and lastPage are the page last read from.
	lastBase uint64
	lastPage []byte
	spent    int
	gets     int
	over     bool
	expired  func() bool
	deadline time.Time
	total    int
	notes    []string
}

var errBudget = errors.New("the walk's read budget or time is spent")

func (w *walker) note(format string, args ...any) {
	if len(w.notes) < maxNotes {
		w.notes = append(w.notes, fmt.Sprintf(format, args...))
	}
}

// get reads p at addr, through the walk's page cache, within its budget
// and time.
func (w *walker) get(addr uint64, p []byte) error {
	if w.over {
		return errBudget
	}
	if w.gets++; w.gets%64 == 0 && (time.Now().After(w.deadline) || w.expired != nil && w.expired()) ||
		w.spent+len(p) > maxBudget {
		w.over = true
		w.note("stopped at %#x: %v (the threads and frames after it are not read)", addr, errBudget)
		return errBudget
	}
	if addr+uint64(len(p)) < addr {
		return &target.MemoryError{Addr: addr}
	}
	if off := addr - w.lastBase; w.lastPage != nil && addr >= w.lastBase && off+uint64(len(p)) <= pageSize {
		copy(p, w.lastPage[off:]) // the page of the last read: most reads follow one another
		return nil
	}
	for done := 0; done < len(p); {
		a := addr + uint64(done)
		base := a &^ (pageSize - 1)
		if w.touched != nil {
			w.touched[base] = true
		}
		pg, ok := w.pages[base]
		if !ok {
			w.spent += pageSize
			if pg = w.spare; pg == nil {
				pg = make([]byte, pageSize)
			}
			w.spare = nil
			if w.mem.ReadMemory(base, pg) != nil {
				w.spare, pg = pg, nil // kept for the next page: unreadable ones cost no allocation
			}
			w.pages[base] = pg
		}
		if pg == nil {
			w.spent += len(p)
			return w.mem.ReadMemory(addr, p)
		}
		w.lastBase, w.lastPage = base, pg
		done += copy(p[done:], pg[a-base:])
	}
	return nil
}

func (w *walker) ptr(addr uint64) (uint64, error) {
	var b [8]byte
	if err := w.get(addr, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

func le64(b []byte, off uint64) uint64 { return binary.LittleEndian.Uint64(b[off:]) }

// walk reads the VM, the ring of its main thread's lt_nodes (the main
// ractor's thread list, whose head lies in the ractor) and each thread
// on it.
func (w *walker) walk() (*Stacks, error) {
	l := w.l
	vm, err := w.ptr(w.rt.VMPtr)
	if err != nil {
		return nil, fmt.Errorf("ruby_current_vm_ptr at %#x: %w", w.rt.VMPtr, err)
	}
	if vm == 0 {
		return nil, nil // libruby loaded, no VM started (an embedder that has not run Ruby)
	}
	b := make([]byte, l.vmMainThread+8)
	if err := w.get(vm, b); err != nil {
		return nil, fmt.Errorf("the VM at %#x: %w", vm, err)
	}
	r, main := le64(b, l.vmMainRactor), le64(b, l.vmMainThread)
	if ok, err := w.isThread(main, r, vm); !ok {
		return nil, fmt.Errorf("the VM at %#x: its main thread %#x is not one of its main ractor %#x: %v", vm, main, r, orNull(err))
	}
	s := &Stacks{}
	seen := map[uint64]bool{}
	start := main + l.thNode
	for node := start; ; {
		if seen[node] || len(seen) >= maxThreads {
			return s, fmt.Errorf("the thread list of ractor %#x is cut at %#x (a loop or more than %d threads)", r, node, maxThreads)
		}
		seen[node] = true
		if ok, err := w.isThread(node-l.thNode, r, vm); err != nil {
			return w.cut(s, fmt.Errorf("the thread list of ractor %#x: node %#x: %w", r, node, err))
		} else if ok {
			th := w.thread(node - l.thNode)
			if w.over {
				return s, nil // the note says why
			}
			s.Threads = append(s.Threads, th)
		}
		next, err := w.ptr(node)
		if err != nil || next == 0 {
			return w.cut(s, fmt.Errorf("the thread list of ractor %#x: node %#x: %v (a null link)", r, node, orNull(err)))
		}
		if node = next; node == start {
			return s, nil
		}
	}
}

// cut ends a walk of the thread list with err, unless the walk's budget
// ended it (which its note says).
func (w *walker) cut(s *Stacks, err error) (*Stacks, error) {
	if w.over {
		return s, nil
	}
	return s, err
}

// isThread reports whether th is a thread of ractor r of the VM vm,
// by its members that say so.
func (w *walker) isThread(th, r, vm uint64) (bool, error) {
	if th == 0 || th&7 != 0 {
		return false, nil
	}
	var b [16]byte
	if err := w.get(th+thRactor, b[:]); err != nil {
		return false, err
	}
	return le64(b[:], 0) == r && le64(b[:], 8) == vm, nil
}

func orNull(err error) error {
	if err == nil {
		return errors.New("null")
	}
	return err
}

// thread reads the Ruby thread at th and its frames.
func (w *walker) thread(th uint64) Thread {
	l := w.l
	t := Thread{Addr: th}
	ec, err := w.ptr(th + l.thEC)
	var b [8]byte
	if err == nil {
		nt := th
		if l.thNT != 0 {
			nt, err = w.ptr(th + l.thNT)
		}
		if err == nil && nt != 0 {
			t.Pthread, err = w.ptr(nt + l.thPthread)
			if err == nil && l.thTID >= 0 {
				err = w.get(nt+uint64(l.thTID), b[:4])
				t.TID = int(int32(binary.LittleEndian.Uint32(b[:4])))
			}
		}
	}
	if err != nil {
		t.End, t.Detail = "unreadable", fmt.Sprintf("thread at %#x: %v", th, err)
		return t
	}
	if ec != 0 {
		w.frames(&t, ec)
	}
	return t
}

// frames reads the control frames of the execution context ec into t:
// from ec->cfp up to the end of its VM stack, where the first frame
// pushed lies.
func (w *walker) frames(t *Thread, ec uint64) {
	l := w.l
	hdr := make([]byte, 24)
	if err := w.get(ec, hdr); err != nil {
		t.End, t.Detail = "unreadable", fmt.Sprintf("execution context at %#x: %v", ec, err)
		return
	}
	stack, size, cfp := le64(hdr, l.ecStack), le64(hdr, l.ecStackSize), le64(hdr, l.ecCFP)
	end := stack + size*8
	if size > 1<<32 || end < stack || cfp < stack || cfp > end || (end-cfp)%l.cfpSize != 0 {
		t.End, t.Detail = "bad-cfp", fmt.Sprintf("execution context at %#x: cfp %#x is not a frame of its VM stack %#x+%d", ec, cfp, stack, size)
		return
	}
	// The outermost frame is the VM's own top frame, which backtraces
	// leave out.
	n := max((end-cfp)/l.cfpSize, 1) - 1
	if n > maxFrames {
		n = maxFrames
		t.End, t.Detail = "depth-limit", fmt.Sprintf("more than %d control frames", maxFrames)
	}
	buf := make([]byte, l.cfpSize)
	act, lastRuby := 0, -1
	for i := uint64(0); i < n; i++ {
		if w.total++; w.total > maxTotal {
			t.End, t.Detail = "depth-limit", fmt.Sprintf("more than %d frames in all threads", maxTotal)
			break
		}
		at := cfp + i*l.cfpSize
		if err := w.get(at, buf); err != nil {
			t.End, t.Detail = w.endOf("unreadable"), fmt.Sprintf("control frame at %#x: %v", at, err)
			break
		}
		f, flags, end, detail := w.frame(at, buf)
		if end != "" {
			t.End, t.Detail = w.endOf(end), detail
			break
		}
		if f != nil {
			f.Activation = act
			t.Frames = append(t.Frames, *f)
			if !f.CFunc {
				// A C method shows its caller's place, the Ruby frames
				// after it.
				for j := len(t.Frames) - 2; j > lastRuby; j-- {
					t.Frames[j].Path, t.Frames[j].Line = f.Path, f.Line
				}
				lastRuby = len(t.Frames) - 1
			}
		}
		if flags&flagFinish != 0 {
			act++ // the first frame an rb_vm_exec activation ran
		}
	}
}

// endOf is end, or "budget" when the walk's budget ended it.
func (w *walker) endOf(end string) string {
	if w.over {
		return "budget"
	}
	return end
}

// frame reads the control frame at (its bytes b): the Ruby or C
// method frame it shows (nil for the VM's own frames), its flags, and
// why the walk ends there when it does.
func (w *walker) frame(at uint64, b []byte) (f *Frame, flags uint64, end, detail string) {
	l := w.l
	pc, iseq, ep := le64(b, l.cfpPC), le64(b, l.cfpIseq), le64(b, l.cfpEP)
	var err error
	if flags, err = w.ptr(ep); err != nil {
		return nil, 0, "unreadable", fmt.Sprintf("control frame at %#x: ep %#x: %v", at, ep, err)
	}
	switch {
	case flags&flagCFrame == 0:
		if iseq == 0 || pc == 0 {
			return nil, flags, "", "" // pushed, not yet run: backtraces skip it
		}
		info, err := w.iseq(iseq)
		if err != nil {
			return nil, flags, "not-iseq", fmt.Sprintf("control frame at %#x: %v", at, err)
		}
		return &Frame{Label: info.label, Path: info.path, Line: w.line(info, pc)}, flags, "", ""
	case flags&frameMagicMask == magicCFunc:
		me, err := w.ptr(ep - 16) // ep[VM_ENV_DATA_INDEX_ME_CREF]
		if err != nil {
			return nil, flags, "unreadable", fmt.Sprintf("C frame at %#x: method entry: %v", at, err)
		}
		return &Frame{Label: w.methodName(me), CFunc: true}, flags, "", ""
	}
	return nil, flags, "", ""
}

// iseq reads (once per cache) the iseq at addr.
func (w *walker) iseq(addr uint64) (*iseqInfo, error) {
	l := w.l
	hdr := make([]byte, 24)
	if err := w.get(addr, hdr); err != nil {
		return nil, fmt.Errorf("iseq at %#x: %w", addr, err)
	}
	flags, body := le64(hdr, 0), le64(hdr, l.iseqBody)
	if k := w.c.iseqs[addr]; k != nil && k.flags == flags && k.body == body {
		return k, nil
	}
	if flags&tMask != tImemo || flags>>flUShift&l.imemoMask != imemoIseq {
		return nil, fmt.Errorf("object at %#x is not an iseq (flags %#x)", addr, flags)
	}
	b := make([]byte, l.bodySucc+8)
	if err := w.get(body, b); err != nil {
		return nil, fmt.Errorf("iseq body at %#x: %w", body, err)
	}
	info := &iseqInfo{flags: flags, body: body,
		encoded: le64(b, l.bodyEncoded), size: uint64(binary.LittleEndian.Uint32(b[4:])),
		insns: le64(b, l.bodyInsns), pos: le64(b, l.bodyPositions), succ: le64(b, l.bodySucc),
		n: uint64(binary.LittleEndian.Uint32(b[l.bodyInsnsSize:]))}
	info.label = w.str(le64(b, l.bodyLabel))
	info.path = w.path(le64(b, l.bodyPath))
	w.c.iseqs[addr] = info
	return info, nil
}

// path is an iseq's path: its pathobj, a String or an Array whose first
// element is.
func (w *walker) path(v uint64) string {
	hdr := make([]byte, 16)
	if v&7 != 0 || v == 0 || w.get(v, hdr) != nil {
		return ""
	}
	if le64(hdr, 0)&tMask == tArray {
		v = w.aref(v, 0)
	}
	return w.str(v)
}

// aref is element i of the Array at a, 0 when it has none.
func (w *walker) aref(a, i uint64) uint64 {
	b := make([]byte, 40)
	if a&7 != 0 || a == 0 || w.get(a, b) != nil {
		return 0
	}
	flags := le64(b, 0)
	if flags&tMask != tArray {
		return 0
	}
	var n, ptr uint64
	if flags&flUser1 != 0 { // embedded
		n, ptr = flags>>arrEmbedLen&arrEmbedMax, a+16
	} else {
		n, ptr = le64(b, 16), le64(b, 32)
	}
	if i >= n {
		return 0
	}
	v, err := w.ptr(ptr + 8*i)
	if err != nil {
		return 0
	}
	return v
}

// str reads the String at v as a name to print: "" when it is not a
// String, longer than maxString, not UTF-8 or holding control or format
// characters.
func (w *walker) str(v uint64) string {
	l := w.l
	if v&7 != 0 || v == 0 {
		return ""
	}
	b := make([]byte, 32)
	if w.get(v, b) != nil {
		return ""
	}
	flags := le64(b, 0)
	if flags&tMask != tString {
		return ""
	}
	var n, data uint64
	switch {
	case flags&flUser1 != 0: // RSTRING_NOEMBED
		n, data = le64(b, l.strLen), le64(b, l.strPtr)
	case l.strLenField:
		n, data = le64(b, l.strLen), v+l.strEmbed
	default:
		n, data = flags>>l.embedShift&0x1f, v+l.strEmbed
	}
	if n == 0 || n > maxString {
		return ""
	}
	raw := make([]byte, n)
	if w.get(data, raw) != nil {
		return ""
	}
	return printable(raw)
}

// printable returns b as a string when it is valid UTF-8 without control
// or format characters, else "".
func printable(b []byte) string {
	if !utf8.Valid(b) {
		return ""
	}
	for _, r := range string(b) {
		if unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r) {
			return ""
		}
	}
	return string(b)
}

// methodName is the name of the method entry at me (its definition's
// original_id, as caller_locations labels a C method), "" when unknown.
func (w *walker) methodName(me uint64) string {
	l := w.l
	b := make([]byte, 24)
	if me&7 != 0 || me == 0 || w.get(me, b) != nil {
		return ""
	}
	flags := le64(b, 0)
	if flags&tMask != tImemo || flags>>flUShift&l.imemoMask != imemoMent {
		return ""
	}
	id, err := w.ptr(le64(b, l.meDef) + l.defOriginalID)
	if err != nil {
		return ""
	}
	return w.idName(id)
}

// idName is the name of symbol id, from the global symbol table.
func (w *walker) idName(id uint64) string {
	if name, ok := w.c.ids[id]; ok {
		return name
	}
	name := w.lookupID(id)
	if !w.over {
		w.c.ids[id] = name
	}
	return name
}

func (w *walker) lookupID(id uint64) string {
	rt, tab := w.rt, w.rt.Symbols
	if tab == 0 || id == 0 {
		return ""
	}
	serial := id
	if id > rt.lastOpID {
		serial = id >> rt.idShift
	}
	last, err := w.ptr(tab)
	if err != nil || serial > last&0xffffffff {
		return ""
	}
	ids, err := w.ptr(tab + 16)
	if err != nil {
		return ""
	}
	chunk := w.aref(ids, serial/512)
	return w.str(w.aref(chunk, serial%512*2))
}
