package perfdata

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/internal/fsafe"
	"github.com/rewindstack/rewind/internal/prefetch"
)

const (
	fileMagic      = 0x32454c4946524550 // "PERFILE2" little endian
	fileMagicSwap  = 0x50455246494c4532 // the same written big endian
	fileHeaderSize = 104
	pipeHeaderSize = 16
	featBuildID    = 2
	featBits       = 256
	buildIDRecHead = 8 + 4 + 24
)

// BuildID is one entry of the build-id feature section: the object perf
// saw mapped, and its GNU build-id.
type BuildID struct {
	PID      int32
	CPUMode  uint16 // MiscKernel, MiscUser, ...
	ID       []byte
	Filename string
}

// File is an opened perf.data file.
type File struct {
	Path  string
	Attrs []*Attr
	// IDs maps event IDs to indexes in Attrs.
	IDs map[uint64]int
	// BuildIDs is the build-id feature section (empty if absent).
	BuildIDs []BuildID
	// FeatureErr reports a feature section that could not be read; the
	// data is still usable.
	FeatureErr error
	// Truncated is set when the data section extends beyond the end of
	// the file (perf was killed, or the file was cut): the records that
	// are complete are still read.
	Truncated bool
	// UnknownIDs counts the records Records skipped because their event
	// id names none of the file's attributes.
	UnknownIDs int

	data     []byte
	mapped   bool
	dataOff  int64
	dataEnd  int64
	features [featBits / 64]uint64

	// populating is done when the background population of the mapping
	// is (nil when there is none).
	populating *sync.WaitGroup
	// ahead is the window populateAhead maps in ahead of what was
	// released (nil for a file populated whole, or not at all).
	ahead *window
	// released is the offset below which the data section was released
	// (see Release).
	released int64
	// stream is set when Records reads the data section with pread (see
	// OpenStream).
	stream *preader
}

// populateLimit is the largest file Open populates whole (see populate).
// A larger one is populated a window at a time ahead of what Release
// gave back (see populateAhead): a 2 GB recording, populated whole, would
// keep 2 GB resident at once.
const populateLimit = 64 << 20

// populateWindow is how far past the record Records is at
// populateAhead maps a large file in.
const populateWindow = 32 << 20

// Open opens and parses a perf.data file. The file is mapped and its
// data section read as Records needs it.
//
// Reading the file into memory instead was tried, on a VM whose host
// shadows its page tables (where the first touch of each 4 KiB page of a
// mapping costs 1-3 µs when perf's small writes left the page cache in
// 4 KiB folios) and that gives free memory back to the host after about
// 2 s (page reporting). Read into huge pages, a 67 MB recording made
// rewind report 1.2x faster when it ran within a second or two of
// another process freeing memory, as in back-to-back benchmark runs; but
// a report typed a few seconds after anything else ran took 123 ms read
// and 75 ms mapped (medians of 10 interleaved pairs, 3 s apart): fresh
// memory the host has to back again cost 2.7-3.9 ms a huge page, 90-130
// ms for the file, against 30 ms of touches for the mapping.
//
// The path "-" (Stdin) reads standard input: a file (rewind report - <
// perf.data) is mapped as any other; a pipe (perf record -o - | rewind
// report -) is copied first into memory outside Go's heap (a memfd),
// then mapped. Errors name it "standard input".
func Open(path string) (*File, error) {
	return open(path, -1)
}

// open is Open, and OpenStream with streamMin >= 0.
func open(path string, streamMin int64) (*File, error) {
	var fd *os.File
	var size int64
	var err error
	if path == Stdin {
		path = "standard input"
		fd, size, err = spoolStdin()
	} else {
		var st os.FileInfo
		if fd, st, err = fsafe.Open(path); err == nil {
			size = st.Size()
		}
	}
	if err != nil {
		return nil, err
	}
	keepFD := false
	defer func() {
		if !keepFD {
			fd.Close()
		}
	}()
	if size < pipeHeaderSize {
		return nil, &FormatError{Pkg: "perfdata", File: path, Offset: 0, Msg: fmt.Sprintf("file of %d bytes is too short for a perf.data header", size)}
	}
	if size != int64(int(size)) {
		return nil, fmt.Errorf("%s: too large", path)
	}
	data, err := unix.Mmap(int(fd.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_PRIVATE)
	mapped := err == nil
	if mapped && streamMin >= 0 {
		// Parsed first: only the header, the attributes and the feature
		// sections are read through the mapping.
		f, perr := Parse(data, path)
		if perr == nil && f.dataEnd-f.dataOff > streamMin && f.startStream(fd) {
			keepFD = true
			f.mapped = true
			return f, nil
		}
		if perr != nil {
			unix.Munmap(data)
			return nil, perr
		}
	}
	var populating *sync.WaitGroup
	var ahead *window
	switch {
	case mapped && size <= populateLimit:
		populating = populate(data)
	case mapped:
		ahead = &window{}
		ahead.cond = sync.NewCond(&ahead.mu)
		populating = populateAhead(data, ahead)
	}
	if err != nil {
		data = make([]byte, size)
		if _, err = fd.ReadAt(data, 0); err != nil {
			return nil, err
		}
	}
	f, err := Parse(data, path)
	if err != nil {
		if mapped {
			if ahead != nil {
				ahead.stop()
			}
			if populating != nil {
				populating.Wait()
			}
			unix.Munmap(data)
		}
		return nil, err
	}
	f.mapped = mapped
	f.populating = populating
	f.ahead = ahead
	return f, nil
}

// Stdin is the path Open takes for standard input.
const Stdin = "-"

// spoolStdin returns standard input as a file that can be mapped, and its
// size: a duplicate of it when it is a regular file, else a memfd holding
// everything read from it.
func spoolStdin() (*os.File, int64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(0, &st); err != nil {
		return nil, 0, fmt.Errorf("standard input: %w", err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		fd, err := unix.Dup(0)
		if err != nil {
			return nil, 0, fmt.Errorf("standard input: %w", err)
		}
		unix.CloseOnExec(fd)
		return os.NewFile(uintptr(fd), "standard input"), st.Size, nil
	}
	if k := st.Mode & unix.S_IFMT; k != unix.S_IFIFO && k != unix.S_IFSOCK {
		return nil, 0, fmt.Errorf("standard input: %w (%s)", fsafe.ErrNotRegular, fsafe.Kind(st.Mode))
	}
	mfd, err := unix.MemfdCreate("rewind-stdin", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, 0, fmt.Errorf("standard input: %w", err)
	}
	f := os.NewFile(uintptr(mfd), "standard input")
	n, err := io.Copy(f, os.Stdin)
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("reading standard input: %w", err)
	}
	return f, n, nil
}

// Every record is read, most of them twice (decoding, then the stack copy
// while unwinding): populate maps the file in up front, in the background
// on every core, while the records are decoded (which then rarely waits for
// a fault), unless it is too large to want all of it resident at once. It
// reads one byte of every 64 KiB: each read faults in the aligned 64 KiB
// around it (the kernel's fault-around, 16 pages at a time, from the page
// cache). MADV_POPULATE_READ, used before, maps page by page: for a 65 MB
// file rewind report's read phase took 6.7 ms (median of 21 runs) with it
// and 4.6-4.8 ms with the reads, at the same CPU time. A kernel with a
// smaller fault-around leaves gaps, which fault in on use. The result is
// done when every part is read.
func populate(data []byte) *sync.WaitGroup {
	const minPart = 4 << 20 // not worth a goroutine below this
	parts := max(1, min(runtime.GOMAXPROCS(0), len(data)/minPart, 8))
	var wg sync.WaitGroup
	step := (len(data)/parts + pageSize - 1) &^ (pageSize - 1)
	for off := 0; off < len(data); off += step {
		part := data[off:min(off+step, len(data))]
		wg.Add(1)
		go func() {
			defer wg.Done()
			var sum byte
			for i := 0; i < len(part); i += faultAround {
				sum += part[i]
			}
			populated.Add(uint32(sum)) // (the reads are not optimized away)
		}()
	}
	return &wg
}

// faultAround is the kernel's default fault-around size
// (fault_around_bytes): a read fault on a file mapping maps this much,
// aligned, of what the page cache holds.
const faultAround = 64 << 10

// window is how far populateAhead may map a file in: up to
// populateWindow past the record Records is at.
type window struct {
	mu       sync.Mutex
	cond     *sync.Cond
	released int64
	stopped  bool
}

// advance lets populateAhead go on up to populateWindow past off.
func (w *window) advance(off int64) {
	w.mu.Lock()
	w.released = max(w.released, off)
	w.cond.Broadcast()
	w.mu.Unlock()
}

// stop ends populateAhead.
func (w *window) stop() {
	w.mu.Lock()
	w.stopped = true
	w.cond.Broadcast()
	w.mu.Unlock()
}

// populateAhead maps a large file in as populate does, in one goroutine,
// never more than populateWindow past the record Records is at: with
// Release, the file is resident a window at a time, as its records are
// consumed. The result
// is done when the goroutine has stopped (at the end of the file, or at
// w.stop).
func populateAhead(data []byte, w *window) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var sum byte
		for off := 0; off < len(data); off += faultAround {
			w.mu.Lock()
			for !w.stopped && int64(off) >= w.released+populateWindow {
				w.cond.Wait()
			}
			stopped := w.stopped
			w.mu.Unlock()
			if stopped {
				break
			}
			sum += data[off]
		}
		populated.Add(uint32(sum))
	}()
	return &wg
}

// populated receives a sum of the bytes populate read.
var populated atomic.Uint32

// pageSize is a multiple of the page size on Linux's architectures:
// madvise wants page-aligned starts.
const pageSize = 64 << 10

// Close releases the file's memory. Records must not be used afterwards.
func (f *File) Close() error {
	if s := f.stream; s != nil {
		f.stopStream()
		s.fd.Close()
		s.inUse = nil
		f.stream = nil
	}
	if f.mapped {
		f.mapped = false
		if f.ahead != nil {
			f.ahead.stop()
		}
		if f.populating != nil {
			f.populating.Wait()
		}
		return unix.Munmap(f.data)
	}
	return nil
}

// Parse parses a perf.data image held in memory; name is used in errors.
func Parse(data []byte, name string) (*File, error) {
	f := &File{Path: name, data: data, IDs: map[uint64]int{}}
	bad := func(off int64, format string, args ...any) error {
		return &FormatError{Pkg: "perfdata", File: name, Offset: uint64(off), Msg: fmt.Sprintf(format, args...)}
	}
	if len(data) < pipeHeaderSize {
		return nil, bad(0, "file of %d bytes is too short for a perf.data header", len(data))
	}
	le := binary.LittleEndian
	switch magic := le.Uint64(data); magic {
	case fileMagic:
	case fileMagicSwap:
		return nil, bad(0, "big-endian perf.data is not supported")
	default:
		return nil, bad(0, "not a perf.data file (magic %#x)", magic)
	}
	hsize := le.Uint64(data[8:])
	if hsize == pipeHeaderSize {
		// perf record -o -: the header sections come as records.
		if err := f.parsePipe(); err != nil {
			return nil, err
		}
		return f, nil
	}
	if hsize < fileHeaderSize {
		return nil, bad(8, "header size %d, want %d", hsize, fileHeaderSize)
	}
	if len(data) < fileHeaderSize {
		return nil, bad(0, "file of %d bytes is too short for its %d-byte header", len(data), fileHeaderSize)
	}
	attrSize := le.Uint64(data[16:])
	attrsOff, attrsSize := le.Uint64(data[24:]), le.Uint64(data[32:])
	dataOff, dataSize := le.Uint64(data[40:]), le.Uint64(data[48:])
	for i := range f.features {
		f.features[i] = le.Uint64(data[72+8*i:])
	}
	if attrSize < attrSizeVer0+16 || attrSize > 1<<16 {
		return nil, bad(16, "attribute entry size %d is implausible", attrSize)
	}
	if attrsOff > uint64(len(data)) || attrsSize > uint64(len(data))-attrsOff {
		return nil, bad(24, "attribute section [%#x, +%#x) lies outside the file of %d bytes", attrsOff, attrsSize, len(data))
	}
	if attrsSize%attrSize != 0 || attrsSize == 0 {
		return nil, bad(32, "attribute section of %d bytes is not a whole number of %d-byte entries", attrsSize, attrSize)
	}
	for off := attrsOff; off < attrsOff+attrsSize; off += attrSize {
		e := data[off : off+attrSize]
		a, err := ParseAttr(e[:attrSize-16])
		if err != nil {
			return nil, bad(int64(off), "%v", err)
		}
		idx := len(f.Attrs)
		f.Attrs = append(f.Attrs, &a)
		idOff, idSize := le.Uint64(e[attrSize-16:]), le.Uint64(e[attrSize-8:])
		if idOff > uint64(len(data)) || idSize > uint64(len(data))-idOff || idSize%8 != 0 {
			return nil, bad(int64(off+attrSize-16), "event id list [%#x, +%#x) is outside the file or misaligned", idOff, idSize)
		}
		for p := idOff; p < idOff+idSize; p += 8 {
			f.IDs[le.Uint64(data[p:])] = idx
		}
	}
	if dataOff > uint64(len(data)) {
		return nil, bad(40, "data section starts at %#x, beyond the end of the file (%d bytes)", dataOff, len(data))
	}
	f.dataOff = int64(dataOff)
	switch {
	case dataSize == 0:
		// perf never finished the header: read to the end of the file.
		f.dataEnd = int64(len(data))
		f.Truncated = f.dataEnd > f.dataOff
	case dataSize > uint64(len(data))-dataOff:
		f.dataEnd = int64(len(data))
		f.Truncated = true
	default:
		f.dataEnd = int64(dataOff + dataSize)
		f.FeatureErr = f.readFeatures(uint64(f.dataEnd))
	}
	return f, nil
}

// featCompressed is the feature bit perf record -z sets
// (HEADER_COMPRESSED).
const featCompressed = 27

// MayBeCompressed reports whether the perf.data file at path may hold
// compressed records (perf record -z): its header announces them, or it
// is a pipe-mode file, whose header announces nothing. It reads only the
// header; a file that cannot be read is not.
func MayBeCompressed(path string) bool {
	fd, _, err := fsafe.Open(path)
	if err != nil {
		return false
	}
	defer fd.Close()
	var h [fileHeaderSize]byte
	n, _ := fd.ReadAt(h[:], 0)
	le := binary.LittleEndian
	if n < pipeHeaderSize || le.Uint64(h[:]) != fileMagic {
		return false
	}
	if le.Uint64(h[8:]) == pipeHeaderSize {
		return true
	}
	return n == fileHeaderSize && le.Uint64(h[72:])&(1<<featCompressed) != 0
}

// HasFeature reports whether the header announces feature section bit.
func (f *File) HasFeature(bit int) bool {
	return bit >= 0 && bit < featBits && f.features[bit/64]&(1<<(bit%64)) != 0
}

// readFeatures reads the feature section table that follows the data.
func (f *File) readFeatures(tableOff uint64) error {
	le := binary.LittleEndian
	n := 0
	for bit := 0; bit < featBits; bit++ {
		if !f.HasFeature(bit) {
			continue
		}
		at := tableOff + uint64(16*n)
		n++
		if at > uint64(len(f.data)) || uint64(len(f.data))-at < 16 {
			return &FormatError{Pkg: "perfdata", File: f.Path, Offset: uint64(at), Msg: "feature section table is truncated"}
		}
		off, size := le.Uint64(f.data[at:]), le.Uint64(f.data[at+8:])
		if off > uint64(len(f.data)) || size > uint64(len(f.data))-off {
			return &FormatError{Pkg: "perfdata", File: f.Path, Offset: uint64(at), Msg: fmt.Sprintf("feature %d section [%#x, +%#x) is outside the file", bit, off, size)}
		}
		if bit == featBuildID {
			ids, err := parseBuildIDs(f.data[off:off+size], int64(off), f.Path)
			f.BuildIDs = ids
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func parseBuildIDs(b []byte, base int64, name string) ([]BuildID, error) {
	le := binary.LittleEndian
	var out []BuildID
	for off := 0; off < len(b); {
		if len(b)-off < buildIDRecHead {
			return out, &FormatError{Pkg: "perfdata", File: name, Offset: uint64(base + int64(off)), Msg: "build-id entry is truncated"}
		}
		misc := le.Uint16(b[off+4:])
		size := int(le.Uint16(b[off+6:]))
		if size < buildIDRecHead || size > len(b)-off {
			return out, &FormatError{Pkg: "perfdata", File: name, Offset: uint64(base + int64(off)), Msg: fmt.Sprintf("build-id entry of %d bytes", size)}
		}
		e := b[off : off+size]
		id := e[12:32]
		if misc&MiscBuildIDSize != 0 {
			if n := int(e[32]); n <= 20 {
				id = id[:n]
			}
		}
		name := e[buildIDRecHead:]
		for i, c := range name {
			if c == 0 {
				name = name[:i]
				break
			}
		}
		out = append(out, BuildID{
			PID:      int32(le.Uint32(e[8:])),
			CPUMode:  misc & MiscCPUModeMask,
			ID:       id,
			Filename: string(name),
		})
		off += size
	}
	return out, nil
}

// Records decodes the data section's records in file order and calls fn
// for each; a non-nil error from fn stops the walk and is returned. The
// Record and everything it points to are valid only during the call:
// slices point into the file's memory, which lives until Close, or, for
// a record that was decompressed (Record.Decompressed), into memory the
// next records are decompressed into.
//
// The records of a file recorded with perf record -z are decompressed
// (Zstandard) as they come, in a window of a fixed size, so that a stream
// that expands far takes no more memory; what they expand to is bounded
// (maxRatio times the data section), past which the walk ends with an
// error saying so. A record that cannot be decoded ends the walk with an
// error naming its offset (for a compressed one, the offset of the
// record that held it); the records before it have been delivered.
// Records of events the file does not describe are skipped and counted in
// UnknownIDs. A truncated file delivers its complete records and then
// returns an error saying so.
func (f *File) Records(fn func(rec *Record) error) error {
	d, err := NewDecoder(f.Attrs, f.IDs)
	if err != nil {
		return &FormatError{Pkg: "perfdata", File: f.Path, Offset: 24, Msg: err.Error()}
	}
	var rec Record
	// each decodes one record, b, found at off (or in the compressed
	// record at off) and hands it to fn.
	each := func(b []byte, off int64, decompressed bool) error {
		if err := d.Decode(b, off, &rec); err != nil {
			if errors.Is(err, ErrUnknownID) {
				// An event this file does not describe: skipped, as
				// perf does, and counted.
				f.UnknownIDs++
				return nil
			}
			var pe *FormatError
			if errors.As(err, &pe) {
				pe.File = f.Path
			}
			return err
		}
		rec.Decompressed = decompressed
		return fn(&rec)
	}
	if f.stream != nil {
		return f.streamRecords(each)
	}
	w := &walker{f: f, off: f.dataOff}
	var advanceAt int64
	for {
		b, off, err := w.next()
		if err != nil {
			return err
		}
		if b == nil {
			return w.end()
		}
		if t := binary.LittleEndian.Uint32(b); t == RecordCompressed || t == RecordCompressed2 {
			// The rest of the file is read with the compressed
			// stream.
			return f.decompress(w, b, off, each)
		}
		f.prefetchAfter(w.off)
		if f.ahead != nil && off >= advanceAt {
			f.ahead.advance(off)
			advanceAt = off + 1<<20
		}
		if err := each(b, off, false); err != nil {
			return err
		}
	}
}

// walker walks the records of the data section.
type walker struct {
	f   *File
	off int64 // of the next record
}

// next returns the next record and its offset, nil at the end of the data
// section, or an error for a record that is cut or has a bad size.
func (w *walker) next() ([]byte, int64, error) {
	f, off := w.f, w.off
	if off >= f.dataEnd {
		return nil, off, nil
	}
	if f.dataEnd-off < recordHeaderSize {
		return nil, off, f.truncErr(off, "record header")
	}
	size := int64(binary.LittleEndian.Uint16(f.data[off+6:]))
	if size < recordHeaderSize {
		return nil, off, f.formatErr(off, "record size %d is smaller than a record header", size)
	}
	if size > f.dataEnd-off {
		return nil, off, f.truncErr(off, "record")
	}
	w.off = off + size
	return f.data[off : off+size : off+size], off, nil
}

// end is the result of a walk that read every record: an error when the
// file was cut.
func (w *walker) end() error {
	if w.f.Truncated {
		return w.f.truncErr(w.off, "data section")
	}
	return nil
}

func (f *File) formatErr(off int64, format string, args ...any) error {
	return &FormatError{Pkg: "perfdata", File: f.Path, Offset: uint64(off), Msg: fmt.Sprintf(format, args...)}
}

// Decoding reads a record's first lines (header, fields, registers) and
// its last (the stack copy's dyn_size), each a wait for memory when the
// file was written long ago: nothing brought its page cache into the
// CPU's caches since. While one record is decoded, the CPU fetches the
// next record's last lines and the first lines of the one after it.

// prefetchHead is how much of a record's start decoding reads: a
// --call-graph dwarf sample's fields and 20 registers take about 250
// bytes.
const prefetchHead = 320

// prefetchAfter has the CPU fetch, without waiting, the end of the record
// at next and the start of the record after it. next's header was
// fetched the same way one record earlier.
func (f *File) prefetchAfter(next int64) {
	if f.dataEnd-next < recordHeaderSize {
		return
	}
	size := int64(binary.LittleEndian.Uint16(f.data[next+6:]))
	if size < recordHeaderSize || size > f.dataEnd-next {
		return
	}
	end := next + size
	prefetch.Bytes(f.data[max(next, end-128):end])
	prefetch.Bytes(f.data[end:min(end+prefetchHead, f.dataEnd)])
}

func (f *File) truncErr(off int64, what string) error {
	return &FormatError{Pkg: "perfdata", File: f.Path, Offset: uint64(off), Msg: fmt.Sprintf("file is truncated: %s cut at the end of the file (%d bytes); earlier records were read", what, len(f.data))}
}

// Release gives back the memory of the data section below offset off
// (page-aligned down): a reader streaming a large file through its
// records (see profiles.ReadPerfData) releases what it has consumed,
// so that what is resident does not grow with the file. The bytes stay
// readable: a page released is read again from the file (the page
// cache) if anything still looks at it. Release of a file read into
// memory (not mapped) does nothing.
func (f *File) Release(off int64) {
	if f.stream != nil {
		f.stream.release(off)
	}
	if !f.mapped {
		return
	}
	off = min(off, f.dataEnd) &^ (pageSize - 1)
	if off <= f.released {
		return
	}
	start := max(f.released, f.dataOff&^(pageSize-1))
	if start < off {
		// (MADV_DONTNEED drops the pages of a private mapping never
		// written to: they are the page cache's, mapped again on use.)
		_ = unix.Madvise(f.data[start:off], unix.MADV_DONTNEED)
	}
	f.released = off
}

// Offset returns the file offset of b's first byte when b lies in the
// file's memory (a record's bytes, a sample's stack copy), else -1.
func (f *File) Offset(b []byte) int64 {
	if len(b) == 0 || len(f.data) == 0 {
		return -1
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(f.data)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if p < base || p >= base+uintptr(len(f.data)) {
		if f.stream != nil {
			return f.stream.offset(b)
		}
		return -1
	}
	return int64(p - base)
}

// DataRange returns the offsets where the data section starts and ends.
func (f *File) DataRange() (start, end int64) { return f.dataOff, f.dataEnd }
