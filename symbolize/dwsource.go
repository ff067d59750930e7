package symbolize

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"github.com/rewindstack/rewind/internal/elfdata"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// dwarfSource reads an object's DWARF on demand, for a dump that looks up
// a few addresses in a large debug file (libc's is 6 MB of .debug_info,
// compressed to 2.3 MB): it decompresses .debug_info only as far as the
// last unit it has been asked for, since a zlib stream cannot be entered
// in the middle, and the other sections (abbreviations, line tables,
// strings, ranges: together less than half of it) whole, in parallel with
// the first stretch of .debug_info.
//
// The dwarf.Data it returns covers the decompressed prefix, cut at a unit
// boundary; when a later request needs a unit beyond it, more is
// decompressed and a new dwarf.Data is made (readers of the old one stay
// valid).
type dwarfSource struct {
	h        *elfdata.File
	bo       binary.ByteOrder
	infoSize uint64    // .debug_info's size, decompressed
	alt      *dwarfAlt // the dwz supplementary file, if any
	aranges  []byte    // .debug_aranges (nil: none)
	execSize uint64    // bytes of code the object has (0: unknown)

	mu    sync.Mutex
	info  []byte    // decompressed prefix of .debug_info
	inf   *inflater // the rest of it, if zlib-compressed (info is its output)
	infoR io.Reader // else the rest of it (nil once all is read)
	units []unitSpan
	real  map[int]bool   // units d is to read (see data)
	orig  map[int][]byte // the headers of the units disguised (see disguise)
	stale bool           // real has grown since d was made

	pendMu  sync.Mutex
	pending []uint64 // offsets asked for by data, not yet taken (see takePending)
	builds  int      // dwarf.Data made
	d       *dwarf.Data
	err     error // a failure decompressing or making d: no more DWARF

	othersOnce sync.Once
	secsDone   chan struct{}
	secs       map[string][]byte // other sections, whole (after secsDone)
	secsErr    error

	// .debug_line, when zlib-compressed, is decompressed only as far as
	// the line tables looked into (see lineFor): secs["line"] is then its
	// buffer, of the decompressed size, filled up to lineInf.n.
	lineMu   sync.Mutex
	lineInf  *inflater
	lineGoal atomic.Int64 // how far prefetchLine has been asked to go
}

// maxPartialBuilds bounds the dwarf.Data made of part of the units.
const maxPartialBuilds = 4

// unitSpan is one unit of .debug_info: its header at hdr, its DIEs from
// die, its end; its version, address size and abbreviations' offset.
type unitSpan struct {
	hdr, die, end uint64
	abbrev        uint64
	version       uint16
	addrSize      uint8
}

// openSource opens path's DWARF; the other sections start decompressing
// at once, in the background.
func openSource(path string) (*dwarfSource, error) {
	h, err := elfdata.Open(path)
	if err != nil {
		return nil, err
	}
	src := &dwarfSource{h: h, bo: h.ELF.ByteOrder, secsDone: make(chan struct{})}
	s := h.ELF.Section(".debug_info")
	if s == nil || s.Type == elf.SHT_NOBITS {
		// No .debug_info (or only a legacy .zdebug_info, which
		// sectionData decompresses whole).
		z := h.ELF.Section(".zdebug_info")
		if z == nil || z.Type == elf.SHT_NOBITS {
			h.Close()
			return nil, errNoDWARF
		}
		b, err := elfdata.Section(z)
		if err != nil {
			h.Close()
			return nil, err
		}
		src.info, src.infoSize = b, uint64(len(b))
	} else {
		if s.Size > elfdata.MaxSection || s.Flags&elf.SHF_COMPRESSED != 0 && s.Size/2048 > s.FileSize {
			h.Close()
			return nil, fmt.Errorf("section %s: implausible size %d", s.Name, s.Size)
		}
		src.infoSize = s.Size
		if f, ok, err := sectionInflater(h.OS, h.ELF, s); ok {
			if err != nil {
				h.Close()
				return nil, fmt.Errorf("section %s: %v", s.Name, err)
			}
			src.inf = f
		} else if err := elfdata.Protect(func() error { src.infoR = s.Open(); return nil }); err != nil {
			h.Close()
			return nil, err
		}
	}
	for _, sec := range h.ELF.Sections {
		// A separate debug file keeps the headers of the object's
		// sections (without their contents).
		if sec.Flags&elf.SHF_EXECINSTR != 0 && !strings.HasPrefix(sec.Name, ".plt") {
			src.execSize += sec.Size
		}
	}
	if a := h.ELF.Section(".debug_aranges"); a != nil && a.Type != elf.SHT_NOBITS {
		// With the inflater when it is compressed (libc's 99 KB: 0.3
		// ms less than compress/zlib, before any unit can be read).
		var ok bool
		if src.aranges, ok, err = inflateSection(h.OS, h.ELF, a); !ok || err != nil {
			src.aranges, _ = elfdata.Section(a)
		}
	} else if a := h.ELF.Section(".zdebug_aranges"); a != nil && a.Type != elf.SHT_NOBITS {
		src.aranges, _ = elfdata.Section(a)
	}
	return src, nil
}

// sourceOf makes a source of section contents keyed by name without
// ".debug_" (all of them given whole; for tests).
func sourceOf(secs map[string][]byte, bo binary.ByteOrder) *dwarfSource {
	src := &dwarfSource{bo: bo, info: secs["info"], infoSize: uint64(len(secs["info"])),
		aranges: secs["aranges"], secs: secs, secsDone: make(chan struct{})}
	close(src.secsDone)
	return src
}

// startOthers starts decompressing the other sections, in the
// background, the first time a unit is asked for: an object none of whose
// units is needed costs no more than its unit table.
func (src *dwarfSource) startOthers() {
	src.othersOnce.Do(func() {
		if src.h != nil {
			src.openLine()
			src.loadOthers()
		}
	})
}

// openLine sets lineInf up for a zlib-compressed .debug_line, which is
// left compressed until a line table is looked into (see lineFor): a dump
// needs those of the units its frames are in (the 17-thread fixture: the
// first 992 KB of libc's 1.3 MB), and a dwarf.Data can be made before any
// is read. It is done before the other sections are started, so that
// prefetchLine need not wait for them (it waited 5 to 6 ms in a cold
// dump, and the units' parsing waited for it).
func (src *dwarfSource) openLine() {
	s := src.h.ELF.Section(".debug_line")
	if s == nil || s.Type == elf.SHT_NOBITS {
		return
	}
	if f, ok, err := sectionInflater(src.h.OS, src.h.ELF, s); ok && err == nil {
		src.lineInf = f
	}
}

// loadOthers decompresses every section but .debug_info, each in a
// goroutine of its own. One after the other they took 9.5 ms for libc
// (.debug_line 5.4 ms, .debug_abbrev 2.2 ms, the rest 1.7 ms), and in a
// cold dump they could start only once the unwinding had left a core free
// (.debug_info's decompression holding the other): making a dwarf.Data,
// which waits for all of them, then waited for the sum. Apart, the core
// the unwinding leaves and the one .debug_info's decompression leaves
// share them.
//
// It returns at once. The goroutines are started in the order their
// results are needed: these before .debug_line's prefetch and before the
// symbol table (see Symbolizer.Preload), since a dwarf.Data waits for
// them; a core that comes free takes the oldest first.
func (src *dwarfSource) loadOthers() {
	secs := map[string][]byte{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	for _, name := range debugSections {
		if name == "info" {
			continue
		}
		s := src.h.ELF.Section(".debug_" + name)
		if s == nil {
			s = src.h.ELF.Section(".zdebug_" + name)
		}
		if s == nil || s.Type == elf.SHT_NOBITS {
			continue
		}
		if name == "line" && src.lineInf != nil {
			mu.Lock() // the other sections' goroutines write secs too
			secs[name] = src.lineInf.out
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, ok, err := inflateSection(src.h.OS, src.h.ELF, s)
			if !ok {
				b, err = elfdata.Section(s)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			secs[name] = b
		}()
	}
	go func() {
		defer close(src.secsDone)
		wg.Wait()
		if firstErr != nil {
			src.secsErr = firstErr
			return
		}
		src.secs = secs
	}()
}

// lineFor returns .debug_line (nil until the other sections are loaded)
// with the line table at off in it decompressed, if it can be: the rest
// of a compressed section may not be yet (and a table past a corrupt
// stretch never is: it reads as empty).
func (src *dwarfSource) lineFor(off int64) []byte {
	src.startOthers()
	<-src.secsDone
	if src.lineInf != nil && off >= 0 {
		src.lineMu.Lock()
		defer src.lineMu.Unlock()
		f := src.lineInf
		if off < int64(len(f.out)) {
			// The table's length, then the table.
			f.run(int(min(off+12, int64(len(f.out)))))
			if int64(f.n) >= off+4 {
				hdr, length := int64(4), int64(src.bo.Uint32(f.out[off:]))
				if length == 0xffffffff && int64(f.n) >= off+12 {
					hdr, length = 12, int64(min(src.bo.Uint64(f.out[off+4:]), elfdata.MaxSection))
				}
				f.run(int(min(off+hdr+length, int64(len(f.out)))))
			}
		}
	}
	return src.secs["line"]
}

// prefetchLine starts decompressing, in the background, the part of
// .debug_line that the units of .debug_info up to infoOff probably refer
// to, so that parsing them finds their line tables ready instead of
// decompressing them one after the other (about 3 ms for libc). Line
// tables come in the order of their units, and take a similar share of
// their section: the guess is the same fraction of .debug_line, 5% and
// 64 KiB more (the fixture's frames in libc: units up to 71% of
// .debug_info, line tables up to 76% of .debug_line, guessed 80%). A
// guess short of a table leaves the rest to lineFor; one past the last
// costs only the decompression.
func (src *dwarfSource) prefetchLine(infoOff uint64) {
	if src.h == nil || src.infoSize == 0 {
		return
	}
	frac := min(float64(infoOff)/float64(src.infoSize), 1)
	f := src.lineInf // set by startOthers, which data calls first
	if f == nil {
		return
	}
	go func() {
		goal := int64(frac*1.05*float64(len(f.out))) + 64<<10
		goal = min(goal, int64(len(f.out)))
		for {
			old := src.lineGoal.Load()
			if goal <= old {
				return
			}
			if src.lineGoal.CompareAndSwap(old, goal) {
				break
			}
		}
		src.lineMu.Lock()
		defer src.lineMu.Unlock()
		f.run(int(goal))
	}()
}

// readTo decompresses .debug_info up to n bytes (or its end). Called with
// mu held.
func (src *dwarfSource) readTo(n uint64) {
	n = min(n, src.infoSize)
	if src.inf != nil {
		src.inflateTo(n)
		return
	}
	if uint64(len(src.info)) >= n || src.infoR == nil || src.err != nil {
		return
	}
	// Read on in steps of at least 64 KiB: unit headers are read one by
	// one as the units are walked.
	want := min(max(n, uint64(len(src.info))+64<<10), src.infoSize)
	if uint64(cap(src.info)) < want {
		// All of it at once: the buffer is never copied, and dwarf.Data
		// made so far keep pointing into it.
		nb := make([]byte, len(src.info), src.infoSize)
		copy(nb, src.info)
		src.info = nb
	}
	old := len(src.info)
	var got int
	err := elfdata.Protect(func() error {
		var err error
		got, err = io.ReadFull(src.infoR, src.info[old:want])
		return err
	})
	src.info = src.info[:old+got]
	if err != nil {
		if uint64(len(src.info)) < n {
			src.err = fmt.Errorf(".debug_info: %v", err)
		}
		src.infoR = nil
	}
	if uint64(len(src.info)) >= src.infoSize {
		src.infoR = nil
	}
}

// inflateTo is readTo for a zlib-compressed .debug_info. Called with mu
// held.
func (src *dwarfSource) inflateTo(n uint64) {
	f := src.inf
	if uint64(f.n) >= n || f.done || src.err != nil {
		return
	}
	// The output is the window later matches copy from: the headers
	// disguise changed must be as they were (disguise makes them over
	// again for the next dwarf.Data).
	for i, orig := range src.orig {
		copy(f.out[src.units[i].hdr:], orig)
	}
	src.orig = nil
	// Steps of at least 64 KiB: unit headers are read one by one as the
	// units are walked.
	err := f.run(int(max(n, uint64(f.n)+64<<10)))
	src.info = f.out[:f.n]
	if err != nil || f.done && uint64(f.n) < src.infoSize {
		if err == nil {
			err = errTruncated
		}
		src.err = fmt.Errorf(".debug_info: %v", err)
	}
}

// more reports whether more of .debug_info may be read.
func (src *dwarfSource) more() bool {
	if src.inf != nil {
		return !src.inf.done && src.inf.err == nil && src.err == nil
	}
	return src.infoR != nil
}

// walkTo discovers the units of .debug_info, reading on, until one that
// ends past off (or the section's end). Called with mu held.
func (src *dwarfSource) walkTo(off uint64) {
	for src.err == nil {
		var next uint64
		if n := len(src.units); n > 0 {
			if src.units[n-1].end > off {
				return
			}
			next = src.units[n-1].end
		}
		if next >= src.infoSize {
			return
		}
		src.readTo(next + 32) // the longest header
		u, ok := unitHeader(src.info, next, src.bo)
		if !ok {
			if uint64(len(src.info)) > next+32 || !src.more() {
				return // malformed: units end here
			}
			continue
		}
		if u.end > src.infoSize {
			return
		}
		src.units = append(src.units, u)
	}
}

// unitAt returns the unit whose header is at hdr, reading as far as its
// end.
func (src *dwarfSource) unitAt(hdr uint64) (unitSpan, bool) {
	src.mu.Lock()
	defer src.mu.Unlock()
	src.walkTo(hdr)
	i := sort.Search(len(src.units), func(i int) bool { return src.units[i].hdr >= hdr })
	if i == len(src.units) || src.units[i].hdr != hdr {
		return unitSpan{}, false
	}
	return src.units[i], true
}

// unitOfDIE returns the header offset of the unit holding the DIE at off.
func (src *dwarfSource) unitOfDIE(off uint64) (uint64, bool) {
	src.mu.Lock()
	defer src.mu.Unlock()
	src.walkTo(off)
	i := sort.Search(len(src.units), func(i int) bool { return src.units[i].end > off })
	if i == len(src.units) || off < src.units[i].die {
		return 0, false
	}
	return src.units[i].hdr, true
}

// data returns a dwarf.Data in which the units holding the DIEs at offs
// can be read (nil if there is no DWARF to be had).
//
// Making a dwarf.Data parses the abbreviation table of every unit it is
// given, which for libc means a table per unit, a megabyte in all. So
// the units no one asked for are given to it disguised: in a copy of the
// prefix, each keeps its length but gets the header of a unit of the same
// version that uses the abbreviations of a unit asked for, so only the
// tables of the units asked for are parsed, and every offset stays what it
// is in the file.
func (src *dwarfSource) data(offs ...uint64) *dwarf.Data {
	src.startOthers() // in parallel with reading .debug_info
	if len(offs) > 0 {
		src.prefetchLine(slices.Max(offs))
	}
	src.pendMu.Lock()
	src.pending = append(src.pending, offs...)
	src.pendMu.Unlock()
	src.mu.Lock()
	defer src.mu.Unlock()
	src.takePending()
	if !src.stale {
		return src.d
	}
	src.stale = false
	src.builds++
	if src.builds > maxPartialBuilds {
		// Lookups keep finding units not asked for beforehand: read all
		// of them, once, rather than parse every table again each time.
		src.walkTo(src.infoSize)
		for i := range src.units {
			src.real[i] = true
		}
	}
	var end uint64
	last := -1
	for {
		end, last = 0, -1
		for i := range src.real {
			if src.units[i].end > end {
				end, last = src.units[i].end, i
			}
		}
		src.readTo(end)
		// Units asked for while this was reading go into the same
		// dwarf.Data: a dump's unwinding asks for its frames' units
		// while the threads' current ones are read (libc: 14 units
		// then, 7 before), and a second dwarf.Data took 0.3 to 0.5 ms.
		if !src.takePending() {
			break
		}
	}
	src.stale = false
	<-src.secsDone
	if src.secsErr != nil && src.err == nil {
		src.err = src.secsErr
	}
	if src.err != nil || end == 0 || uint64(len(src.info)) < end {
		return src.d
	}
	if len(src.real) < last+1 || len(src.orig) > 0 {
		src.disguise(end)
	}
	info := src.info[:end:end]
	secs := make(map[string][]byte, len(src.secs)+1)
	for k, v := range src.secs {
		secs[k] = v
	}
	secs["info"] = info
	d, err := dwarfFromSections(secs)
	if err != nil {
		src.err = err
		return src.d
	}
	// A reader's first Seek into a DWARF 5 unit records the unit's base
	// offsets in d: done here, once for each unit anyone is to read, d
	// can be read from several goroutines (units are parsed in parallel).
	_ = elfdata.Protect(func() error {
		r := d.Reader()
		for i := range src.real {
			r.Seek(dwarf.Offset(src.units[i].die))
		}
		return nil
	})
	src.d = d
	return d
}

// takePending marks the units holding the offsets asked for (see data)
// as to be read, reading .debug_info as far as each; it reports whether
// any was not yet. Called with mu held.
func (src *dwarfSource) takePending() bool {
	src.pendMu.Lock()
	offs := src.pending
	src.pending = nil
	src.pendMu.Unlock()
	added := false
	for _, off := range offs {
		src.walkTo(off)
		i := sort.Search(len(src.units), func(i int) bool { return src.units[i].end > off })
		if i == len(src.units) || off < src.units[i].hdr {
			continue
		}
		if !src.real[i] {
			if src.real == nil {
				src.real = map[int]bool{}
			}
			src.real[i], src.stale, added = true, true, true
		}
	}
	return added
}

// disguise gives the units of .debug_info up to end that were not asked
// for the header of one that was (see data), and the units asked for
// since they were disguised their own back. It works in place: a
// dwarf.Data made before keeps reading only the units it was made for,
// whose bytes never change. Called with mu held.
func (src *dwarfSource) disguise(end uint64) {
	var model unitSpan
	found := false
	for i := range src.real {
		if u := src.units[i]; !found || u.hdr < model.hdr {
			model, found = u, true
		}
	}
	for i, u := range src.units {
		if u.end > end {
			break
		}
		if src.real[i] {
			if orig, ok := src.orig[i]; ok {
				copy(src.info[u.hdr:], orig)
				delete(src.orig, i)
			}
			continue
		}
		if _, ok := src.orig[i]; ok {
			continue // disguised already
		}
		// The unit's own length, in its own format (32 or 64-bit).
		p, offSize := uint64(4), 4
		if src.bo.Uint32(src.info[u.hdr:]) == 0xffffffff {
			p, offSize = 12, 8
		}
		length := u.end - u.hdr - p
		if length < uint64(4+offSize)+1 {
			continue // too short to disguise (an empty unit is skipped anyway)
		}
		h := src.info[u.hdr+p : u.end]
		if src.orig == nil {
			src.orig = map[int][]byte{}
		}
		src.orig[i] = append([]byte(nil), src.info[u.hdr:u.hdr+p+uint64(4+offSize)]...)
		src.bo.PutUint16(h, model.version)
		if model.version >= 5 {
			h[2], h[3] = 0x01, model.addrSize // DW_UT_compile
			putOff(src.bo, h[4:], model.abbrev, offSize)
		} else {
			putOff(src.bo, h[2:], model.abbrev, offSize)
			h[2+offSize] = model.addrSize
		}
	}
}

func putOff(bo binary.ByteOrder, b []byte, v uint64, size int) {
	if size == 8 {
		bo.PutUint64(b, v)
	} else {
		bo.PutUint32(b, uint32(v))
	}
}

// all reads the whole of .debug_info and returns the dwarf.Data of it.
func (src *dwarfSource) all() *dwarf.Data {
	src.mu.Lock()
	src.walkTo(src.infoSize)
	offs := make([]uint64, len(src.units))
	for i, u := range src.units {
		offs[i] = u.hdr
	}
	src.mu.Unlock()
	return src.data(offs...)
}

// unitHeader reads the header of the unit at off in info: where its DIEs
// start and where it ends. ok is false when the header is not all in
// info or is malformed.
func unitHeader(info []byte, off uint64, bo binary.ByteOrder) (u unitSpan, ok bool) {
	if off > uint64(len(info)) || uint64(len(info))-off < 4 {
		return u, false
	}
	b := info[off:]
	length := uint64(bo.Uint32(b))
	p, offSize := uint64(4), uint64(4)
	switch {
	case length == 0xffffffff:
		if len(b) < 12 {
			return u, false
		}
		length, p, offSize = bo.Uint64(b[4:]), 12, 8
	case length >= 0xfffffff0:
		return u, false
	}
	if length > elfdata.MaxSection {
		return u, false
	}
	u.hdr, u.end = off, off+p+length
	if length == 0 {
		u.die = u.end
		return u, true
	}
	if uint64(len(b)) < p+2 {
		return u, false
	}
	version := bo.Uint16(b[p:])
	p += 2
	u.version = version
	readOff := func(at uint64) uint64 {
		if offSize == 8 {
			return bo.Uint64(b[at:])
		}
		return uint64(bo.Uint32(b[at:]))
	}
	switch {
	case version >= 2 && version <= 4:
		if uint64(len(b)) < p+offSize+1 {
			return u, false
		}
		u.abbrev, u.addrSize = readOff(p), b[p+offSize]
		p += offSize + 1 // abbreviation offset, address size
	case version == 5:
		if uint64(len(b)) < p+2+offSize {
			return u, false
		}
		utype := b[p]
		u.addrSize, u.abbrev = b[p+1], readOff(p+2)
		p += 2 + offSize // unit type, address size, abbreviation offset
		switch utype {
		case 0x02, 0x06: // type, split_type: signature, type offset
			p += 8 + offSize
		case 0x04, 0x05: // skeleton, split_compile: DWO id
			p += 8
		}
	default:
		return u, false
	}
	if p > p+length || uint64(len(b)) < p {
		return u, false
	}
	u.die = off + p
	if u.die > u.end {
		return u, false
	}
	return u, true
}

// arange is one address range of .debug_aranges: [lo, hi) is in the unit
// whose header is at unit.
type arange struct {
	lo, hi, unit uint64
}

// parseAranges reads .debug_aranges (version 2, any address size). ok is
// false when the section is malformed: the caller then reads the ranges
// from the units themselves. Empty ranges and ranges at address 0 (code
// the linker discarded) are left out, as the unit scan leaves them out.
func parseAranges(b []byte, bo binary.ByteOrder) (rs []arange, ok bool) {
	for off := 0; off < len(b); {
		if len(b)-off < 4 {
			return nil, false
		}
		length := uint64(bo.Uint32(b[off:]))
		p, offSize := 4, 4
		if length == 0xffffffff {
			if len(b)-off < 12 {
				return nil, false
			}
			length, p, offSize = bo.Uint64(b[off+4:]), 12, 8
		} else if length >= 0xfffffff0 {
			return nil, false
		}
		if length > uint64(len(b)-off-p) {
			return nil, false
		}
		set := b[off : off+p+int(length)]
		off += p + int(length)
		if len(set) < p+2+offSize+2 {
			return nil, false
		}
		if bo.Uint16(set[p:]) != 2 {
			return nil, false
		}
		q := p + 2
		var unit uint64
		if offSize == 8 {
			unit = bo.Uint64(set[q:])
		} else {
			unit = uint64(bo.Uint32(set[q:]))
		}
		q += offSize
		asize, segSize := int(set[q]), int(set[q+1])
		q += 2
		if segSize != 0 || asize != 4 && asize != 8 {
			return nil, false
		}
		// Tuples start at a multiple of their size from the set's start.
		if tuple := 2 * asize; q%tuple != 0 {
			q += tuple - q%tuple
		}
		for {
			if len(set)-q < 2*asize {
				break // no terminator: tolerated, as readelf does
			}
			var lo, n uint64
			if asize == 8 {
				lo, n = bo.Uint64(set[q:]), bo.Uint64(set[q+8:])
			} else {
				lo, n = uint64(bo.Uint32(set[q:])), uint64(bo.Uint32(set[q+4:]))
			}
			q += 2 * asize
			if lo == 0 && n == 0 {
				break
			}
			if lo != 0 && lo+n > lo {
				rs = append(rs, arange{lo, lo + n, unit})
			}
		}
	}
	return rs, true
}
