// Package jitdump reads the jitdump files JIT compilers write for perf
// (jit-PID.dump: Node's --perf-prof, CPython 3.13's -X perf_jit, the
// JVM's perf agent, .NET's DOTNET_PerfMapEnabled), as `perf inject --jit`
// reads them: a header, then records of code loaded (name, address, size,
// the code itself), moved, its line table (debug info) and its unwinding
// information (.eh_frame), in the writer's byte order.
//
// A dump is written by the process it describes, which may be hostile:
// every length is checked against the record and the file, a record that
// does not fit ends the reading (Dump.Truncated) with what came before
// kept, at most MaxSize bytes and MaxCodes code loads are taken, and Open
// refuses a file that is not a regular file or not owned by the
// process's user or root. Errors name the file and the offset.
package jitdump

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/rewindstack/rewind/internal/fsafe"
)

// Limits on what is read.
const (
	// MaxSize is the most of a dump read, in bytes.
	MaxSize = 1 << 30
	// MaxRecord is the largest record taken (a code load carries its
	// code); a larger one ends the reading.
	MaxRecord = 64 << 20
	// MaxCodes is the most code loads (and moves) kept.
	MaxCodes = 1 << 20
	// MaxLines is the most debug entries kept in all.
	MaxLines = 4 << 20
)

// Magic is the header's first word, "JiTD" in the writer's byte order.
const Magic = 0x4A695444

// Record types.
const (
	CodeLoad          = 0
	CodeMove          = 1
	CodeDebugInfo     = 2
	CodeClose         = 3
	CodeUnwindingInfo = 4
)

// FlagArchTimestamp in Header.Flags says the records are stamped with
// the CPU's time stamp counter, not a clock_gettime clock.
const FlagArchTimestamp = 1

// Header is the dump's file header.
type Header struct {
	Version   uint32
	ElfMach   uint32 // the ELF e_machine of the code (62 for x86-64)
	PID       uint32
	Timestamp uint64
	Flags     uint64
	// BigEndian says the writer's byte order was big-endian.
	BigEndian bool
}

// Line is one debug entry: the code from Addr on is at File:Line.
type Line struct {
	Addr uint64
	File string
	Line int
}

// Code is one piece of generated code at [Start, End), valid from time
// From (its load or move) until Until (0 while it still is).
type Code struct {
	Name       string
	Start, End uint64
	Index      uint64 // the writer's code_index
	From       uint64
	Until      uint64
	// Lines is the line table from the debug info record before the
	// load, sorted by address, nil when there was none.
	Lines []Line
	// EHFrame is the unwinding information record's data before the
	// load (an .eh_frame, then EHFrameHdr bytes of .eh_frame_hdr), nil
	// when there was none.
	EHFrame    []byte
	EHFrameHdr uint64
	seq        int // the place in Dump.Codes
}

// LineAt returns the file and line of pc in c, ok false when its debug
// info does not cover it.
func (c *Code) LineAt(pc uint64) (string, int, bool) {
	i := sort.Search(len(c.Lines), func(i int) bool { return c.Lines[i].Addr > pc }) - 1
	if i < 0 || pc < c.Start || pc >= c.End {
		return "", 0, false
	}
	return c.Lines[i].File, c.Lines[i].Line, true
}

// Dump is a parsed jitdump.
type Dump struct {
	Header
	// Codes are the code loads and moves in file order (a move is a
	// Code of its own at the new address, the old one's Until set).
	Codes   []*Code
	byStart []*Code  // Codes sorted by Start
	maxEnd  []uint64 // maxEnd[i] = the greatest End of byStart[:i+1]
	// Skipped counts records of unknown types and debug or unwinding
	// records that did not parse.
	Skipped int
	// Truncated says the reading stopped before the end: a record that
	// did not fit, or a limit reached.
	Truncated bool
	// Closed says the dump ends with a JIT_CODE_CLOSE record.
	Closed bool
}

// reader reads the dump's fields in its byte order, tracking the offset.
type reader struct {
	r     *bufio.Reader
	order binary.ByteOrder
	off   int64
	limit int64
	name  string
}

func (r *reader) errorf(off int64, format string, a ...any) error {
	return fmt.Errorf("jitdump %s: offset %d: %s", r.name, off, fmt.Sprintf(format, a...))
}

// full reads exactly len(p) bytes.
func (r *reader) full(p []byte) error {
	if r.off+int64(len(p)) > r.limit {
		return io.ErrUnexpectedEOF
	}
	n, err := io.ReadFull(r.r, p)
	r.off += int64(n)
	return err
}

// skip discards n bytes.
func (r *reader) skip(n int64) error {
	if r.off+n > r.limit {
		return io.ErrUnexpectedEOF
	}
	m, err := r.r.Discard(int(n))
	r.off += int64(m)
	return err
}

// Parse reads a dump from rd, at most limit bytes (MaxSize when limit <=
// 0); name is the file's, for errors. A header that is not a jitdump's is
// an error; a record that does not fit ends the reading with Truncated.
func Parse(rd io.Reader, limit int64, name string) (*Dump, error) {
	if limit <= 0 || limit > MaxSize {
		limit = MaxSize
	}
	r := &reader{r: bufio.NewReaderSize(rd, 64<<10), order: binary.LittleEndian, limit: limit, name: name}
	var h [40]byte
	if err := r.full(h[:]); err != nil {
		return nil, r.errorf(0, "header: %v", err)
	}
	d := &Dump{}
	switch binary.LittleEndian.Uint32(h[0:]) {
	case Magic:
	case 0x4454694A:
		r.order, d.BigEndian = binary.BigEndian, true
	default:
		return nil, r.errorf(0, "magic %#x is not a jitdump's (%#x)", binary.LittleEndian.Uint32(h[0:]), Magic)
	}
	o := r.order
	d.Version, d.ElfMach, d.PID = o.Uint32(h[4:]), o.Uint32(h[12:]), o.Uint32(h[20:])
	d.Timestamp, d.Flags = o.Uint64(h[24:]), o.Uint64(h[32:])
	if size := int64(o.Uint32(h[8:])); size > int64(len(h)) {
		// A newer writer's longer header: its fields are skipped.
		if err := r.skip(size - int64(len(h))); err != nil {
			return nil, r.errorf(int64(len(h)), "header of %d bytes: %v", size, err)
		}
	}
	var p parser
	p.d = d
	for !d.Closed {
		err := p.record(r)
		if err == io.EOF {
			break
		}
		if err != nil {
			var re *recordError
			if errors.As(err, &re) {
				d.Truncated = true
				break
			}
			return nil, err
		}
	}
	d.index()
	return d, nil
}

// recordError is a record that does not fit: the reading ends there.
type recordError struct{ error }

// parser holds what applies to the next code load.
type parser struct {
	d       *Dump
	lines   []Line
	ehFrame []byte
	ehHdr   uint64
	nLines  int
	byIndex map[uint64]*Code  // the latest code of each code_index
	files   map[string]string // file names, kept once each
}

// record reads one record; io.EOF at a clean end of the file.
func (p *parser) record(r *reader) error {
	at := r.off
	var h [16]byte
	if _, err := r.r.Peek(1); err == io.EOF {
		return io.EOF
	} else if r.off >= r.limit {
		p.d.Truncated = true // more than limit bytes
		return io.EOF
	}
	if err := r.full(h[:]); err != nil {
		return &recordError{r.errorf(at, "record header: %v", err)}
	}
	o := r.order
	id, size, ts := o.Uint32(h[0:]), int64(o.Uint32(h[4:])), o.Uint64(h[8:])
	if size < int64(len(h)) || size > MaxRecord {
		return &recordError{r.errorf(at, "record of type %d claims %d bytes", id, size)}
	}
	body := size - int64(len(h))
	switch id {
	case CodeLoad, CodeMove, CodeDebugInfo, CodeUnwindingInfo:
		b := make([]byte, body)
		if err := r.full(b); err != nil {
			return &recordError{r.errorf(at, "record of type %d, %d bytes: %v", id, size, err)}
		}
		return p.parse(r, at, id, ts, b)
	case CodeClose:
		p.d.Closed = true
		return r.skip(body)
	}
	p.d.Skipped++
	if err := r.skip(body); err != nil {
		return &recordError{r.errorf(at, "record of type %d, %d bytes: %v", id, size, err)}
	}
	return nil
}

// parse decodes a record's body b.
func (p *parser) parse(r *reader, at int64, id uint32, ts uint64, b []byte) error {
	o, d := r.order, p.d
	switch id {
	case CodeLoad:
		// pid, tid, vma, code_addr, code_size, code_index, name, code.
		if len(b) < 40 {
			return &recordError{r.errorf(at, "code load of %d bytes", len(b)+16)}
		}
		addr, size, index := o.Uint64(b[16:]), o.Uint64(b[24:]), o.Uint64(b[32:])
		name, _, ok := bytes.Cut(b[40:], []byte{0})
		if !ok || size == 0 || addr+size < addr {
			return &recordError{r.errorf(at, "code load: name unterminated, or code [%#x, +%#x) empty or wrapping", addr, size)}
		}
		if len(d.Codes) >= MaxCodes {
			return &recordError{r.errorf(at, "more than %d code loads", MaxCodes)}
		}
		c := &Code{Name: string(name), Start: addr, End: addr + size, Index: index, From: ts,
			Lines: p.lines, EHFrame: p.ehFrame, EHFrameHdr: p.ehHdr}
		p.lines, p.ehFrame, p.ehHdr = nil, nil, 0
		p.add(c)
	case CodeMove:
		// pid, tid, vma, old_code_addr, new_code_addr, code_size, code_index.
		if len(b) < 48 {
			return &recordError{r.errorf(at, "code move of %d bytes", len(b)+16)}
		}
		old, addr, size, index := o.Uint64(b[16:]), o.Uint64(b[24:]), o.Uint64(b[32:]), o.Uint64(b[40:])
		if size == 0 || addr+size < addr {
			return &recordError{r.errorf(at, "code move to [%#x, +%#x): empty or wrapping", addr, size)}
		}
		if len(d.Codes) >= MaxCodes {
			return &recordError{r.errorf(at, "more than %d code loads", MaxCodes)}
		}
		c := &Code{Start: addr, End: addr + size, Index: index, From: ts}
		if prev := p.byIndex[index]; prev != nil && prev.Start == old && prev.Until == 0 {
			prev.Until = ts
			c.Name, c.EHFrame, c.EHFrameHdr = prev.Name, prev.EHFrame, prev.EHFrameHdr
			for _, l := range prev.Lines {
				c.Lines = append(c.Lines, Line{Addr: l.Addr - old + addr, File: l.File, Line: l.Line})
			}
		} else {
			d.Skipped++ // a move of code never loaded
			return nil
		}
		p.add(c)
	case CodeDebugInfo:
		if err := p.debugInfo(o, b); err != nil {
			d.Skipped++
			p.lines = nil
		}
	case CodeUnwindingInfo:
		// unwinding_size, eh_frame_hdr_size, mapped_size, data.
		if len(b) < 24 || o.Uint64(b[0:]) > uint64(len(b)-24) || o.Uint64(b[8:]) > o.Uint64(b[0:]) {
			d.Skipped++
			return nil
		}
		p.ehFrame, p.ehHdr = b[24:24+o.Uint64(b[0:])], o.Uint64(b[8:])
	}
	return nil
}

// add keeps a code load or move, and ends what it replaces: perf maps the
// code of a load over whatever was at its addresses.
func (p *parser) add(c *Code) {
	if p.byIndex == nil {
		p.byIndex = map[uint64]*Code{}
	}
	p.byIndex[c.Index] = c
	c.seq = len(p.d.Codes)
	p.d.Codes = append(p.d.Codes, c)
}

// debugInfo parses a debug info record: code_addr, nr_entry, then entries
// of addr, line, discriminator and a NUL-terminated file name ("\xff"
// for the previous entry's file, as perf writes and reads it).
func (p *parser) debugInfo(o binary.ByteOrder, b []byte) error {
	if len(b) < 16 {
		return errors.New("short")
	}
	n := o.Uint64(b[8:])
	b = b[16:]
	if n > uint64(len(b)/17) || p.nLines+int(n) > MaxLines {
		return errors.New("too many entries")
	}
	lines := make([]Line, 0, n)
	prev := ""
	for i := uint64(0); i < n; i++ {
		if len(b) < 16 {
			return errors.New("short entry")
		}
		addr, line := o.Uint64(b[0:]), o.Uint32(b[8:])
		file, rest, ok := bytes.Cut(b[16:], []byte{0})
		if !ok {
			return errors.New("unterminated file name")
		}
		f := prev
		if string(file) != "\xff" {
			f = p.file(file)
		}
		prev, b = f, rest
		lines = append(lines, Line{Addr: addr, File: f, Line: int(min(line, 1<<30))})
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].Addr < lines[j].Addr })
	p.nLines += len(lines)
	p.lines = lines
	return nil
}

// file returns the file name b, one string per name.
func (p *parser) file(b []byte) string {
	if f, ok := p.files[string(b)]; ok {
		return f
	}
	if p.files == nil {
		p.files = map[string]string{}
	}
	f := string(b)
	p.files[f] = f
	return f
}

// index sorts the codes by start for lookups.
func (d *Dump) index() {
	d.byStart = append([]*Code(nil), d.Codes...)
	sort.SliceStable(d.byStart, func(i, j int) bool { return d.byStart[i].Start < d.byStart[j].Start })
	d.maxEnd = make([]uint64, len(d.byStart))
	var m uint64
	for i, c := range d.byStart {
		m = max(m, c.End)
		d.maxEnd[i] = m
	}
}

// maxScan bounds the codes one lookup looks at: overlapping code (a
// hostile dump's thousand loads at one address) costs no more.
const maxScan = 4096

// At returns the code holding pc at time t: of the codes loaded or moved
// there by t and not moved away, the last loaded. With t ^uint64(0) it is
// the code there at the end of the dump.
func (d *Dump) At(pc, t uint64) (*Code, bool) {
	i := sort.Search(len(d.byStart), func(i int) bool { return d.byStart[i].Start > pc }) - 1
	var best *Code
	for n := 0; i >= 0 && d.maxEnd[i] > pc && n < maxScan; i, n = i-1, n+1 {
		c := d.byStart[i]
		if pc >= c.End || c.From > t || c.Until != 0 && c.Until <= t {
			continue
		}
		// The latest in time wins; of equal times, the later in file.
		if best == nil || c.From > best.From || c.From == best.From && c.seq > best.seq {
			best = c
		}
	}
	return best, best != nil
}

// LookupJIT implements target.JITSymbols: the code there at the end of
// the dump.
func (d *Dump) LookupJIT(pc uint64) (string, uint64, bool) {
	c, ok := d.At(pc, ^uint64(0))
	if !ok {
		return "", 0, false
	}
	return c.Name, c.Start, true
}

// LookupJITLine returns the file and line of pc from the debug info of
// the code there at the end of the dump.
func (d *Dump) LookupJITLine(pc uint64) (string, int, bool) {
	c, ok := d.At(pc, ^uint64(0))
	if !ok {
		return "", 0, false
	}
	return c.LineAt(pc)
}

// ErrNotOwned is wrapped by Open's error for a dump owned by neither the
// process's user nor root.
var ErrNotOwned = errors.New("not owned by the process's user or root")

// Open reads the dump at path, which must be a regular file owned by root
// or uid (the process's user; -1 for any). It never blocks on a FIFO or
// opens a device (fsafe.Open).
func Open(path string, uid int) (*Dump, error) {
	f, fi, err := fsafe.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if s, ok := fi.Sys().(*syscall.Stat_t); !ok || uid >= 0 && s.Uid != 0 && int(s.Uid) != uid {
		return nil, fmt.Errorf("jitdump %s: %w", path, ErrNotOwned)
	}
	return Parse(f, min(fi.Size(), MaxSize), path)
}

// IsDump reports whether path names a jitdump, jit-PID.dump: perf finds
// a process's dump by the process mapping a file of that name (the
// writers map it for that reason).
func IsDump(path string) bool {
	base := filepath.Base(path)
	n, ok := strings.CutPrefix(base, "jit-")
	if n, ok = strings.CutSuffix(n, ".dump"); !ok || n == "" {
		return false
	}
	_, err := strconv.ParseUint(n, 10, 32)
	return err == nil
}

// OpenProcess reads the dump process pid mapped at path (as the process
// sees it: under its root directory, owned by its user or root). For a
// process that has exited (a recording's command, read when the profile
// is written) it reads path itself, owned by root or the user running
// this, as perf inject does.
func OpenProcess(pid int, path string) (*Dump, error) {
	if st, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
		uid := -1
		if s, ok := st.Sys().(*syscall.Stat_t); ok {
			uid = int(s.Uid)
		}
		return Open(fmt.Sprintf("/proc/%d/root%s", pid, path), uid)
	}
	return Open(path, os.Geteuid())
}
