// Package corefile reads ELF core dumps, as written by the Linux kernel or
// by gdb's gcore, as a snapshot source for unwinding: the threads and their
// registers, the auxiliary vector, the mapped files, and the process's
// memory.
//
// Memory comes from the core's PT_LOAD segments where they hold bytes, and
// otherwise from the mapped files named in the NT_FILE note: both the kernel
// (by default) and gcore leave out the contents of unmodified file-backed
// mappings such as program text. The kernel writes a PT_LOAD with
// p_filesz 0 (or only the first page, for ELF headers) for such mappings;
// gcore writes no PT_LOAD for them at all. ReadMemory handles both.
//
// Core files may be hostile: every count and size is checked against the
// file's length before anything is allocated, and every error names the
// file ("corefile: /path: ...").
package corefile

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"

	"github.com/rewindstack/rewind/internal/fileerr"
	"github.com/rewindstack/rewind/internal/fsafe"
	"github.com/rewindstack/rewind/internal/readat"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
)

// Auxiliary vector tags that unwinding uses.
const (
	AtPhdr        = 3  // AT_PHDR: address of the executable's program headers
	AtBase        = 7  // AT_BASE: load address of the dynamic loader
	AtEntry       = 9  // AT_ENTRY: the executable's entry point
	AtSysinfoEhdr = 33 // AT_SYSINFO_EHDR: load address of the vDSO
)

// Note types read from the core.
const (
	ntPrstatus = 1
	ntPrpsinfo = 3
	ntAuxv     = 6
	ntFile     = 0x46494c45 // "FILE"
)

// Thread is one thread of the dumped process.
type Thread struct {
	// TID is the thread id (pr_pid of its NT_PRSTATUS note).
	TID int
	// Regs are the general registers from pr_reg, indexed by DWARF number
	// (amd64: rax..r15 and rip; arm64: x0..x30, sp and pc). For an
	// architecture rewind does not know, Regs is empty.
	Regs regs.Regs
	// Signal is pr_cursig, the signal the thread was handling (0 if none).
	Signal int
	// TP is the thread pointer from pr_reg (fs_base on amd64), 0 when
	// the register set does not hold it.
	TP uint64
}

// Core is an opened core dump.
type Core struct {
	// Path is the core file's path.
	Path string
	// Arch is regs.AMD64 or regs.ARM64, or regs.Unknown for other machines.
	Arch regs.Arch
	// Machine is the core's e_machine.
	Machine elf.Machine
	// ByteOrder is the core's byte order.
	ByteOrder binary.ByteOrder
	// PID is the process id: pr_pid of NT_PRPSINFO, or else the first
	// thread's TID.
	PID int
	// Name is pr_fname of NT_PRPSINFO: the process name (at most 15 bytes).
	Name string
	// Exe is the best guess at the executable's path: the NT_FILE mapping
	// containing AT_ENTRY (or else AT_PHDR) from the auxiliary vector, or
	// else Name.
	Exe string
	// Args is pr_psargs of NT_PRPSINFO: the start of the command line, with
	// arguments separated by spaces (at most 80 bytes).
	Args string
	// Threads are the threads in note order; the first is the one that
	// caused the dump (for gcore, the thread gdb had selected).
	Threads []Thread
	// Mappings are the NT_FILE entries (file-backed mappings) sorted by
	// Start, with their permissions from the PT_LOAD that covers them
	// ("" when none does). Offset is in bytes (NT_FILE stores it in units
	// of its page-size field; this is already multiplied out). Thread
	// names are not recorded in cores, so there is nothing like them here.
	Mappings []target.Mapping
	// Auxv is the auxiliary vector from NT_AUXV (tag to value; AT_NULL is
	// not included). See AtEntry, AtPhdr, AtSysinfoEhdr, AtBase.
	Auxv map[uint64]uint64

	fh    *os.File
	r     io.ReaderAt
	size  int64
	class elf.Class
	segs  []segment // PT_LOADs sorted by vaddr
	// wantSize is the file size the PT_LOADs and PT_NOTEs promise (see
	// Truncated).
	wantSize uint64
	// notesCut is the file offset at which the truncated file cut a note
	// short (0 when every note was whole); see NotesCut.
	notesCut uint64
	// seen records which process-wide notes were read.
	haveAuxv, haveFile bool

	mu     sync.Mutex
	opener func(path string) (io.ReaderAt, error)
	files  map[string]*openFile
}

// segment is one PT_LOAD of the core.
type segment struct {
	vaddr, memsz uint64
	off, filesz  uint64 // filesz is clipped to what the file really holds
	promised     uint64 // p_filesz before clipping (more when truncated)
	flags        elf.ProgFlag
}

// openFile caches a mapped file opened for ReadMemory.
type openFile struct {
	r   io.ReaderAt
	err error
}

// maxNotes bounds the bytes of notes read from one PT_NOTE; cores of
// processes with tens of thousands of threads stay far below it.
const maxNotes = 1 << 30

// Open opens and parses the core dump at path. The file stays open until
// Close because ReadMemory reads from it.
func Open(path string) (*Core, error) {
	fh, st, err := fsafe.Open(path)
	if err != nil {
		return nil, fmt.Errorf("corefile: %w", err)
	}
	c := &Core{Path: path, fh: fh, r: fh, size: st.Size()}
	if err := c.parse(); err != nil {
		fh.Close()
		return nil, err
	}
	return c, nil
}

// Close closes the core file and every mapped file ReadMemory opened (those
// that implement io.Closer).
func (c *Core) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, f := range c.files {
		if cl, ok := f.r.(io.Closer); ok {
			if err := cl.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	c.files = nil
	if c.fh != nil {
		if err := c.fh.Close(); err != nil {
			errs = append(errs, err)
		}
		c.fh = nil
		c.r = closedReader{}
	}
	if err := errors.Join(errs...); err != nil {
		return c.errorf("close: %v", err)
	}
	return nil
}

type closedReader struct{}

func (closedReader) ReadAt([]byte, int64) (int, error) { return 0, os.ErrClosed }

// SetFileOpener replaces how ReadMemory opens mapped files (by default
// os.Open of the mapping's Path), for example to look them up under a sysroot or
// in a debuginfod cache. Files already opened stay cached; set the opener
// before the first ReadMemory. A returned io.ReaderAt that is also an
// io.Closer is closed by Close.
func (c *Core) SetFileOpener(open func(path string) (io.ReaderAt, error)) {
	c.mu.Lock()
	c.opener = open
	c.mu.Unlock()
}

// errorf formats an error that names the core file.
// FormatError reports a malformed core file: its path, the header, segment
// or note concerned, the byte offset (in it, or in the file when none is
// named) and what is wrong. It is the FormatError of every rewind parser
// (cfi, sframe, perfdata, elfobj report theirs with the same type).
type FormatError = fileerr.FormatError

// formatf returns a FormatError about section (a header, segment or
// note) sec at offset off, wrapping err when it is not nil.
func (c *Core) formatf(sec string, off uint64, err error, format string, args ...any) error {
	return &FormatError{Pkg: "corefile", File: c.Path, Section: sec, Offset: off, Msg: fmt.Sprintf(format, args...), Err: err}
}

func (c *Core) errorf(format string, args ...any) error {
	return fmt.Errorf("corefile: %s: %s", c.Path, fmt.Sprintf(format, args...))
}

// readAt reads n bytes at off after checking them against the file size.
func (c *Core) readAt(off, n uint64) ([]byte, error) {
	if off > uint64(c.size) || n > uint64(c.size)-off {
		return nil, fmt.Errorf("offset %#x: %d bytes extend beyond the end of the file (size %d)", off, n, c.size)
	}
	buf := make([]byte, n)
	if err := readat.Full(c.r, buf, off); err != nil {
		return nil, fmt.Errorf("offset %#x: %w", off, err)
	}
	return buf, nil
}

// parse reads the ELF header, program headers and notes.
func (c *Core) parse() error {
	var hdr [64]byte
	n, _ := c.r.ReadAt(hdr[:], 0)
	if n < 16 || string(hdr[:4]) != elf.ELFMAG {
		return c.formatf("ELF header", 0, nil, "not an ELF file")
	}
	switch elf.Data(hdr[elf.EI_DATA]) {
	case elf.ELFDATA2LSB:
		c.ByteOrder = binary.LittleEndian
	case elf.ELFDATA2MSB:
		c.ByteOrder = binary.BigEndian
	default:
		return c.formatf("ELF header", uint64(elf.EI_DATA), nil, "unknown ELF data encoding %d", hdr[elf.EI_DATA])
	}
	bo := c.ByteOrder
	c.class = elf.Class(hdr[elf.EI_CLASS])
	var phoff, phentsize, phnum, shoff uint64
	switch c.class {
	case elf.ELFCLASS64:
		if n < 64 {
			return c.formatf("ELF header", uint64(n), io.ErrUnexpectedEOF, "truncated ELF header (%d bytes)", n)
		}
		phoff = bo.Uint64(hdr[32:])
		shoff = bo.Uint64(hdr[40:])
		phentsize = uint64(bo.Uint16(hdr[54:]))
		phnum = uint64(bo.Uint16(hdr[56:]))
	case elf.ELFCLASS32:
		if n < 52 {
			return c.formatf("ELF header", uint64(n), io.ErrUnexpectedEOF, "truncated ELF header (%d bytes)", n)
		}
		phoff = uint64(bo.Uint32(hdr[28:]))
		shoff = uint64(bo.Uint32(hdr[32:]))
		phentsize = uint64(bo.Uint16(hdr[42:]))
		phnum = uint64(bo.Uint16(hdr[44:]))
	default:
		return c.formatf("ELF header", uint64(elf.EI_CLASS), nil, "unknown ELF class %d", hdr[elf.EI_CLASS])
	}
	if typ := elf.Type(bo.Uint16(hdr[16:])); typ != elf.ET_CORE {
		return c.formatf("ELF header", 16, nil, "not a core file (type %v)", typ)
	}
	c.Machine = elf.Machine(bo.Uint16(hdr[18:]))
	switch {
	case c.Machine == elf.EM_X86_64 && c.class == elf.ELFCLASS64:
		c.Arch = regs.AMD64
	case c.Machine == elf.EM_AARCH64 && c.class == elf.ELFCLASS64:
		c.Arch = regs.ARM64
	}
	w := c.word()
	if phnum == 0xffff {
		// PN_XNUM: the real count is sh_info of section header 0.
		if shoff == 0 {
			return c.formatf("ELF header", 56, nil, "PN_XNUM program header count without a section header")
		}
		infoOff := uint64(28)
		if w == 8 {
			infoOff = 44
		}
		b, err := c.readAt(shoff+infoOff, 4)
		if err != nil {
			return c.formatf("section header 0", infoOff, err, "file offset %#x", shoff)
		}
		phnum = uint64(bo.Uint32(b))
	}
	want := uint64(32)
	if w == 8 {
		want = 56
	}
	if phnum == 0 {
		return c.formatf("ELF header", 0, nil, "no program headers")
	}
	if phentsize < want {
		return c.formatf("ELF header", 0, nil, "program header size %d, want at least %d", phentsize, want)
	}
	if phnum > uint64(c.size)/phentsize {
		return c.formatf("program headers", 0, nil, "%d program headers of %d bytes do not fit in the file (%d bytes; they start at file offset %#x)", phnum, phentsize, c.size, phoff)
	}
	ph, err := c.readAt(phoff, phnum*phentsize)
	if err != nil {
		return c.formatf("program headers", 0, err, "reading them")
	}
	var notes []struct{ off, size uint64 }
	for i := uint64(0); i < phnum; i++ {
		p := ph[i*phentsize:]
		var typ, flags uint32
		var off, vaddr, filesz, memsz uint64
		if w == 8 {
			typ, flags = bo.Uint32(p[0:]), bo.Uint32(p[4:])
			off, vaddr = bo.Uint64(p[8:]), bo.Uint64(p[16:])
			filesz, memsz = bo.Uint64(p[32:]), bo.Uint64(p[40:])
		} else {
			typ, off = bo.Uint32(p[0:]), uint64(bo.Uint32(p[4:]))
			vaddr = uint64(bo.Uint32(p[8:]))
			filesz, memsz = uint64(bo.Uint32(p[16:])), uint64(bo.Uint32(p[20:]))
			flags = bo.Uint32(p[24:])
		}
		switch elf.ProgType(typ) {
		case elf.PT_LOAD:
			if memsz == 0 {
				continue
			}
			if vaddr+memsz < vaddr {
				memsz = -vaddr // clip at the top of the address space
			}
			// A truncated core holds fewer bytes than p_filesz promises;
			// treat the rest as not dumped (Truncated reports it).
			c.wantSize = max(c.wantSize, off+filesz)
			avail := uint64(0)
			if off < uint64(c.size) {
				avail = uint64(c.size) - off
			}
			promised := min(filesz, memsz)
			filesz = min(filesz, memsz, avail)
			c.segs = append(c.segs, segment{vaddr: vaddr, memsz: memsz, off: off, filesz: filesz, promised: promised, flags: elf.ProgFlag(flags)})
		case elf.PT_NOTE:
			notes = append(notes, struct{ off, size uint64 }{off, filesz})
		}
	}
	sort.SliceStable(c.segs, func(i, j int) bool { return c.segs[i].vaddr < c.segs[j].vaddr })
	for _, nt := range notes {
		if nt.size > maxNotes {
			return c.formatf("PT_NOTE", 0, nil, "file offset %#x: %d bytes is implausibly large", nt.off, nt.size)
		}
		// gcore writes its notes after the memory: a core cut short
		// loses them first. Read what the file holds; parseNotes keeps
		// every whole note (each thread's registers are one).
		c.wantSize = max(c.wantSize, nt.off+nt.size)
		size := nt.size
		if avail := uint64(max(c.size, 0)); nt.off >= avail {
			size = 0
		} else {
			size = min(size, avail-nt.off)
		}
		var data []byte
		if size > 0 {
			var err error
			if data, err = c.readAt(nt.off, size); err != nil {
				return c.formatf("PT_NOTE", 0, err, "reading it")
			}
		}
		if err := c.parseNotes(data, nt.off, size < nt.size); err != nil {
			return err
		}
	}
	if c.PID == 0 && len(c.Threads) > 0 {
		c.PID = c.Threads[0].TID
	}
	sort.SliceStable(c.Mappings, func(i, j int) bool { return c.Mappings[i].Start < c.Mappings[j].Start })
	for i := range c.Mappings {
		c.Mappings[i].Perms = c.permsAt(c.Mappings[i].Start)
	}
	c.Exe = c.Name
	for _, tag := range []uint64{AtEntry, AtPhdr} {
		if v, ok := c.Auxv[tag]; ok {
			if m := c.mappingAt(v); m != nil {
				c.Exe = m.Path
				break
			}
		}
	}
	return nil
}

// permsAt returns the permissions, as /proc/PID/maps prints them, of the
// PT_LOAD segment that starts at addr ("" when none does). Kernel cores
// and gcore write a PT_LOAD for every mapping, file-backed ones included
// (with no file bytes when the text was not dumped).
func (c *Core) permsAt(addr uint64) string {
	i := sort.Search(len(c.segs), func(i int) bool { return c.segs[i].vaddr >= addr })
	if i == len(c.segs) || c.segs[i].vaddr != addr {
		return ""
	}
	p := []byte("---p")
	for _, f := range []struct {
		bit elf.ProgFlag
		pos int
		ch  byte
	}{{elf.PF_R, 0, 'r'}, {elf.PF_W, 1, 'w'}, {elf.PF_X, 2, 'x'}} {
		if c.segs[i].flags&f.bit != 0 {
			p[f.pos] = f.ch
		}
	}
	return string(p)
}

// word is the size of a long in the core's class.
func (c *Core) word() uint64 {
	if c.class == elf.ELFCLASS32 {
		return 4
	}
	return 8
}

// uword reads a long of the core's class.
func (c *Core) uword(b []byte) uint64 {
	if c.class == elf.ELFCLASS32 {
		return uint64(c.ByteOrder.Uint32(b))
	}
	return c.ByteOrder.Uint64(b)
}

// parseNotes walks one PT_NOTE's notes; base is its file offset, for errors.
// parseNotes reads the notes of one PT_NOTE, data, at file offset base.
// cut says the file ended inside the segment: a note that runs past data
// then ends the notes read (NotesCut says where) rather than being an
// error.
func (c *Core) parseNotes(data []byte, base uint64, cut bool) error {
	bo := c.ByteOrder
	end := uint64(len(data))
	off := uint64(0)
	defer func() {
		if cut && c.notesCut == 0 {
			c.notesCut = base + off
		}
	}()
	for end-off >= 12 {
		namesz := uint64(bo.Uint32(data[off:]))
		descsz := uint64(bo.Uint32(data[off+4:]))
		typ := bo.Uint32(data[off+8:])
		nameOff := off + 12
		if namesz > end-nameOff {
			if cut {
				return nil
			}
			return c.formatf("PT_NOTE", off, nil, "note at file offset %#x: name size %d overruns the note segment", base+off, namesz)
		}
		descOff := (nameOff + namesz + 3) &^ 3
		if descOff > end || descsz > end-descOff {
			if cut {
				return nil
			}
			return c.formatf("PT_NOTE", off, nil, "note at file offset %#x: descriptor size %d overruns the note segment", base+off, descsz)
		}
		name := string(bytes.TrimRight(data[nameOff:nameOff+namesz], "\x00"))
		desc := data[descOff : descOff+descsz]
		if name == "CORE" {
			var err error
			switch typ {
			case ntPrstatus:
				err = c.parsePrstatus(desc)
			case ntPrpsinfo:
				err = c.parsePrpsinfo(desc)
			case ntAuxv:
				err, c.haveAuxv = c.parseAuxv(desc), true
			case ntFile:
				err, c.haveFile = c.parseFile(desc), true
			}
			if err != nil {
				return c.formatf("PT_NOTE", off, err, "note at file offset %#x (type %#x)", base+off, typ)
			}
		}
		next := (descOff + descsz + 3) &^ 3
		if next > end {
			off = end
			break
		}
		off = next
	}
	return nil
}

// parsePrstatus decodes struct elf_prstatus: pr_info (3 ints), pr_cursig
// (short), pr_sigpend and pr_sighold (longs), pr_pid, pr_ppid, pr_pgrp,
// pr_sid (ints), four struct timevals, then pr_reg.
func (c *Core) parsePrstatus(d []byte) error {
	bo := c.ByteOrder
	w := c.word()
	pidOff := 12 + 2 + 2 + 2*w // pr_sigpend is long-aligned
	if w == 4 {
		pidOff = 24
	}
	regOff := pidOff + 16 + 4*2*w
	if uint64(len(d)) < pidOff+4 {
		return fmt.Errorf("NT_PRSTATUS: %d bytes, too short", len(d))
	}
	t := Thread{
		TID:    int(int32(bo.Uint32(d[pidOff:]))),
		Signal: int(int16(bo.Uint16(d[12:]))),
		Regs:   regs.New(c.Arch),
	}
	if n := uint64(regs.UserRegsWords(c.Arch)); n > 0 {
		if uint64(len(d)) < regOff+n*8 {
			return fmt.Errorf("NT_PRSTATUS: %d bytes, too short for %s registers", len(d), c.Arch)
		}
		words := make([]uint64, n)
		for i := range words {
			words[i] = bo.Uint64(d[regOff+uint64(i)*8:])
		}
		r, err := regs.FromUser(c.Arch, words)
		if err != nil {
			return fmt.Errorf("NT_PRSTATUS: %w", err)
		}
		t.Regs = r
		t.TP = regs.ThreadPointer(c.Arch, words)
	}
	c.Threads = append(c.Threads, t)
	return nil
}

// parsePrpsinfo decodes struct elf_prpsinfo: pr_state, pr_sname, pr_zomb,
// pr_nice (chars), pr_flag (long), pr_uid, pr_gid (32-bit on amd64 and
// arm64), pr_pid, pr_ppid, pr_pgrp, pr_sid, pr_fname[16], pr_psargs[80].
func (c *Core) parsePrpsinfo(d []byte) error {
	w := c.word()
	// 64-bit: four chars, padding, pr_flag at 8, pr_uid and pr_gid (32-bit)
	// at 16 and 20, pr_pid at 24. 32-bit (i386, arm): pr_flag at 4, 16-bit
	// pr_uid and pr_gid at 8 and 10, pr_pid at 12.
	pidOff := uint64(24)
	if w == 4 {
		pidOff = 12
	}
	fnameOff := pidOff + 16
	if uint64(len(d)) < fnameOff+16+80 {
		return fmt.Errorf("NT_PRPSINFO: %d bytes, too short", len(d))
	}
	c.PID = int(int32(c.ByteOrder.Uint32(d[pidOff:])))
	c.Name = cString(d[fnameOff : fnameOff+16])
	c.Args = string(bytes.TrimRight([]byte(cString(d[fnameOff+16:fnameOff+16+80])), " "))
	return nil
}

// cString returns b up to its first NUL.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// parseAuxv decodes (tag, value) pairs of longs up to AT_NULL.
func (c *Core) parseAuxv(d []byte) error {
	w := c.word()
	if c.Auxv == nil {
		c.Auxv = make(map[uint64]uint64, min(uint64(len(d))/(2*w), 64))
	}
	for off := uint64(0); off+2*w <= uint64(len(d)); off += 2 * w {
		tag := c.uword(d[off:])
		if tag == 0 {
			break
		}
		c.Auxv[tag] = c.uword(d[off+w:])
	}
	return nil
}

// parseFile decodes NT_FILE: count and page size (longs), count triples of
// (start, end, file offset in pages), then count NUL-terminated paths.
func (c *Core) parseFile(d []byte) error {
	w := c.word()
	if uint64(len(d)) < 2*w {
		return fmt.Errorf("NT_FILE: %d bytes, too short", len(d))
	}
	count := c.uword(d)
	pageSize := c.uword(d[w:])
	if count > (uint64(len(d))-2*w)/(3*w) {
		return fmt.Errorf("NT_FILE: %d entries do not fit in %d bytes", count, len(d))
	}
	names := d[2*w+count*3*w:]
	ms := make([]target.Mapping, 0, count)
	for i := uint64(0); i < count; i++ {
		e := d[2*w+i*3*w:]
		start, end, pgoff := c.uword(e), c.uword(e[w:]), c.uword(e[2*w:])
		nul := bytes.IndexByte(names, 0)
		if nul < 0 {
			return fmt.Errorf("NT_FILE: entry %d of %d has no file name", i, count)
		}
		off := pgoff * pageSize
		if pageSize != 0 && off/pageSize != pgoff {
			return fmt.Errorf("NT_FILE: entry %d: file offset overflows", i)
		}
		if end < start {
			return fmt.Errorf("NT_FILE: entry %d: end %#x before start %#x", i, end, start)
		}
		ms = append(ms, target.Mapping{Start: start, End: end, Offset: off, Path: string(names[:nul])})
		names = names[nul+1:]
	}
	c.Mappings = append(c.Mappings, ms...)
	return nil
}

// mappingAt returns the NT_FILE mapping containing addr, or nil.
func (c *Core) mappingAt(addr uint64) *target.Mapping {
	i := sort.Search(len(c.Mappings), func(i int) bool { return c.Mappings[i].Start > addr }) - 1
	if i >= 0 && addr < c.Mappings[i].End {
		return &c.Mappings[i]
	}
	return nil
}

// segmentAt returns the index of the PT_LOAD containing addr, or -1, and the
// index of the first PT_LOAD starting after addr.
func (c *Core) segmentAt(addr uint64) (int, int) {
	i := sort.Search(len(c.segs), func(i int) bool { return c.segs[i].vaddr > addr })
	if i > 0 && addr-c.segs[i-1].vaddr < c.segs[i-1].memsz {
		return i - 1, i
	}
	return -1, i
}

// AnonymousSegments returns, as mappings with their permissions, the
// PT_LOADs that no NT_FILE mapping covers: anonymous memory (heaps,
// thread and coroutine stacks), which Mappings leaves out.
func (c *Core) AnonymousSegments() []target.Mapping {
	var out []target.Mapping
	for _, sg := range c.segs {
		if c.mappingAt(sg.vaddr) == nil {
			out = append(out, target.Mapping{Start: sg.vaddr, End: sg.vaddr + sg.memsz, Perms: c.permsAt(sg.vaddr)})
		}
	}
	return out
}

// SegmentAt returns the bounds of the memory segment (PT_LOAD) that
// contains addr, for example a thread's stack, whose mapping is anonymous
// and so absent from Mappings.
func (c *Core) SegmentAt(addr uint64) (start, end uint64, ok bool) {
	i, _ := c.segmentAt(addr)
	if i < 0 {
		return 0, 0, false
	}
	return c.segs[i].vaddr, c.segs[i].vaddr + c.segs[i].memsz, true
}

// ReadMemory reads the process memory [addr, addr+len(p)). Bytes come from
// the core's PT_LOAD segments where the core holds them (p_filesz); where
// no segment covers an address, or its bytes were not dumped (beyond
// p_filesz, as for unmodified file-backed text), they come from the mapped
// file named by NT_FILE, read at Offset + (addr - Start). Mapped files are
// opened on first use (see SetFileOpener) and kept open until Close. Reads
// may span several segments and mappings. An error names the first address
// that is unavailable. ReadMemory is safe for concurrent use.
func (c *Core) ReadMemory(addr uint64, p []byte) error {
	if addr+uint64(len(p)) < addr && addr+uint64(len(p)) != 0 {
		return c.errorf("address range %#x+%d wraps around", addr, len(p))
	}
	for len(p) > 0 {
		si, next := c.segmentAt(addr)
		// limit is the end of the span handled by this iteration.
		limit := ^uint64(0)
		if si >= 0 {
			s := &c.segs[si]
			rel := addr - s.vaddr
			if rel < s.filesz {
				n := min(uint64(len(p)), s.filesz-rel)
				if err := readat.Full(c.r, p[:n], s.off+rel); err != nil {
					return c.errorf("address %#x: core offset %#x: %v", addr, s.off+rel, err)
				}
				p = p[n:]
				addr += n
				continue
			}
			limit = s.vaddr + s.memsz
			if limit < s.vaddr {
				limit = ^uint64(0)
			}
		} else if next < len(c.segs) {
			limit = c.segs[next].vaddr
		}
		m := c.mappingAt(addr)
		if m == nil {
			if si >= 0 && addr-c.segs[si].vaddr < c.segs[si].promised {
				return c.errorf("address %#x: cut off: the core is truncated (%d bytes, its segments need %d)", addr, c.size, c.wantSize)
			}
			if si >= 0 {
				return c.errorf("address %#x: not dumped in the core and not backed by a mapped file", addr)
			}
			return c.errorf("address %#x: not in the core", addr)
		}
		limit = min(limit, m.End)
		n := min(uint64(len(p)), limit-addr)
		if err := c.readMapped(m, addr, p[:n]); err != nil {
			return err
		}
		p = p[n:]
		addr += n
	}
	return nil
}

// readMapped reads p at runtime address addr from mapping m's file.
func (c *Core) readMapped(m *target.Mapping, addr uint64, p []byte) error {
	r, err := c.mappedFile(m.Path)
	if err != nil {
		return c.errorf("address %#x: mapped file %s: %v", addr, m.Path, err)
	}
	off := m.Offset + (addr - m.Start)
	if off < m.Offset {
		return c.errorf("address %#x: mapped file %s: offset overflows", addr, m.Path)
	}
	if err := readat.Full(r, p, off); err != nil {
		return c.errorf("address %#x: mapped file %s: offset %#x: %v", addr, m.Path, off, err)
	}
	return nil
}

// mappedFile opens (once) the file at path for ReadMemory, checking that
// its ELF header matches the copy dumped in the core, if there is one, so
// that a file replaced since the dump (a library upgrade, say) is refused
// rather than silently misread.
func (c *Core) mappedFile(path string) (io.ReaderAt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.files[path]; ok {
		return f.r, f.err
	}
	if c.files == nil {
		c.files = map[string]*openFile{}
	}
	f := &openFile{}
	c.files[path] = f
	open := c.opener
	if open == nil {
		// The paths come from the core's NT_FILE note: never block on a
		// FIFO or open a device it names.
		open = func(path string) (io.ReaderAt, error) {
			f, _, err := fsafe.Open(path)
			if err != nil {
				return nil, err
			}
			return f, nil
		}
	}
	r, err := open(path)
	if err != nil {
		f.err = err
		return nil, err
	}
	if err := c.checkHeader(path, r); err != nil {
		if cl, ok := r.(io.Closer); ok {
			cl.Close()
		}
		f.err = err
		return nil, err
	}
	f.r = r
	return r, nil
}

// checkHeader compares the first 64 bytes of a mapped ELF file with the
// bytes the core holds for its offset-0 mapping, when the core has them.
func (c *Core) checkHeader(path string, r io.ReaderAt) error {
	for i := range c.Mappings {
		m := &c.Mappings[i]
		if m.Path != path || m.Offset != 0 || m.End-m.Start < 64 {
			continue
		}
		si, _ := c.segmentAt(m.Start)
		if si < 0 || c.segs[si].filesz < m.Start-c.segs[si].vaddr+64 {
			continue
		}
		s := &c.segs[si]
		var inCore, inFile [64]byte
		if readat.Full(c.r, inCore[:], s.off+m.Start-s.vaddr) != nil || string(inCore[:4]) != elf.ELFMAG {
			continue
		}
		if err := readat.Full(r, inFile[:], 0); err != nil {
			return fmt.Errorf("reading ELF header: %v", err)
		}
		if inCore != inFile {
			return errors.New("ELF header differs from the one dumped in the core (file replaced since the dump?)")
		}
		return nil
	}
	return nil
}
