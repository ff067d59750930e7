package perfdata

import (
	"encoding/binary"
	"os"
	"sync"
	"unsafe"
)

// A large recording read through its mapping costs, on a VM whose host
// shadows the guest's page tables, about 2 µs for the first touch of
// every 4 KiB page, whether or not the guest's page tables already map
// it (MADV_POPULATE_READ mapped a 336 MB file in 16-28 ms, and touching
// its pages afterwards still took 160-210 ms); a --call-graph dwarf
// sample of 8 KiB touches at least the page of its header and the page
// of its stack copy's end, so nearly every page. Copying the same bytes
// with pread into a few buffers that are reused costs no such touch (the
// kernel copies from its own mapping of the page cache): decoding the
// 336 MB recording's records and reading 2 KiB of each stack copy took
// 203-306 ms through the mapping and 57-83 ms copied 256 KiB at a time,
// the copies then in the CPU's caches when they are read. OpenStream reads
// a large file's data section that way.

// streamChunk is the part of the data section one pread copies.
const streamChunk = 512 << 10

// streamHead is the room before a chunk's bytes where the start of a
// record that straddles the chunk's start is copied from the chunk
// before, so that every record is whole in one chunk (a record is at most
// 64 KiB: its size is 16 bits).
const streamHead = 64 << 10

// streamAhead is how many chunks the reading goroutine copies ahead of the
// record Records is at.
const streamAhead = 3

// chunk is a part of the data section copied into memory: buf[streamHead:
// streamHead+n] holds the n bytes at file offset at; buf[lo:streamHead]
// holds the bytes before at that the decoder copied there (a straddling
// record's start).
type chunk struct {
	buf []byte
	at  int64
	n   int
	lo  int
	err error
}

// base is the file offset of buf[0].
func (c *chunk) base() int64 { return c.at - streamHead }

// end is the file offset past the chunk's bytes.
func (c *chunk) end() int64 { return c.at + int64(c.n) }

// preader is the state of a file whose data section is read with pread.
type preader struct {
	fd   *os.File
	once sync.Once // the reading goroutine is started once
	// ready receives the chunks read, in file order (closed after the
	// last one, or at an error); free, the chunks released.
	ready chan *chunk
	free  chan *chunk
	stop  chan struct{}
	done  sync.WaitGroup

	// mu guards inUse: the chunks handed to the decoder and not released
	// yet, in file order (Offset and Release look at them).
	mu    sync.Mutex
	inUse []*chunk
}

// OpenStream is Open for a reader that consumes the data section once, in
// order, and releases what it consumed (see Release): when the data
// section is larger than min bytes and its records are not compressed,
// Records copies it with pread, a chunk at a time ahead of the record it
// is at, into buffers reused once released, instead of reading it through
// the file's mapping. The bytes of a record (and of what it points to,
// such as a sample's stack copy) then stay valid until Release is given
// an offset past the record, or Close. A smaller file is opened as Open
// does.
func OpenStream(path string, min int64) (*File, error) {
	return open(path, min)
}

// startStream sets f up to read its data section from fd (which it then
// keeps open until Close), unless it is compressed.
func (f *File) startStream(fd *os.File) bool {
	if f.HasFeature(featCompressed) {
		return false
	}
	f.stream = &preader{fd: fd, ready: make(chan *chunk, streamAhead), free: make(chan *chunk, 64), stop: make(chan struct{})}
	return true
}

// read copies the data section, chunk by chunk, into ready until the end,
// an error, or stop.
func (s *preader) read(from, to int64) {
	defer s.done.Done()
	defer close(s.ready)
	for at := from; at < to; {
		var c *chunk
		select {
		case c = <-s.free:
		default:
			c = &chunk{buf: make([]byte, streamHead+streamChunk)}
		}
		c.at, c.lo = at, streamHead
		c.n, c.err = readFull(s.fd, c.buf[streamHead:streamHead+int(min(streamChunk, to-at))], at)
		select {
		case s.ready <- c:
		case <-s.stop:
			return
		}
		if c.err != nil {
			return
		}
		at += int64(c.n)
	}
}

// readFull reads len(b) bytes at off, or fewer with an error.
func readFull(fd *os.File, b []byte, off int64) (int, error) {
	n := 0
	for n < len(b) {
		m, err := fd.ReadAt(b[n:], off+int64(n))
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// streamRecords is Records for a streamed file.
func (f *File) streamRecords(each func(b []byte, off int64, decompressed bool) error) error {
	s := f.stream
	s.once.Do(func() {
		s.done.Add(1)
		go s.read(f.dataOff, f.dataEnd)
	})
	var cur *chunk
	off := f.dataOff
	for off < f.dataEnd {
		// The record at off, whole in cur: the next chunk is taken when
		// it is not, with the part of the record in cur copied before
		// its bytes.
		var size int64
		for {
			if cur != nil && cur.end()-off >= recordHeaderSize {
				i := int(off - cur.base())
				size = int64(binary.LittleEndian.Uint16(cur.buf[i+6:]))
				if size < recordHeaderSize {
					return f.formatErr(off, "record size %d is smaller than a record header", size)
				}
				if size > f.dataEnd-off {
					return f.truncErr(off, "record")
				}
				if cur.end()-off >= size {
					break
				}
			}
			if f.dataEnd-off < recordHeaderSize {
				return f.truncErr(off, "record header")
			}
			next, ok := <-s.ready
			if !ok {
				return f.truncErr(off, "record")
			}
			if next.err != nil {
				return f.formatErr(next.at, "reading the file: %v", next.err)
			}
			if cur != nil {
				part := cur.buf[off-cur.base() : cur.streamHeadEnd()]
				next.lo = streamHead - len(part)
				copy(next.buf[next.lo:], part)
			}
			s.mu.Lock()
			s.inUse = append(s.inUse, next)
			s.mu.Unlock()
			cur = next
		}
		b := cur.buf[off-cur.base() : off-cur.base()+size : off-cur.base()+size]
		if t := binary.LittleEndian.Uint32(b); t == RecordCompressed || t == RecordCompressed2 {
			// Compressed records (in a file whose header did not say
			// so): the rest is read through the mapping.
			f.stopStream()
			return f.decompress(&walker{f: f, off: off + size}, f.data[off:off+size:off+size], off, each)
		}
		if err := each(b, off, false); err != nil {
			return err
		}
		off += size
	}
	return (&walker{f: f, off: off}).end()
}

// streamHeadEnd is the index in buf past the chunk's bytes.
func (c *chunk) streamHeadEnd() int { return streamHead + c.n }

// stopStream ends the reading goroutine.
func (f *File) stopStream() {
	s := f.stream
	if s == nil {
		return
	}
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.done.Wait()
}

// releaseStream hands the chunks that end at or before off back to the
// reading goroutine.
func (s *preader) release(off int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for n < len(s.inUse) && s.inUse[n].end() <= off {
		c := s.inUse[n]
		s.inUse[n] = nil
		n++
		select {
		case s.free <- c:
		default:
		}
	}
	s.inUse = s.inUse[:copy(s.inUse, s.inUse[n:])]
}

// offset returns the file offset of b's first byte when b lies in a chunk
// not released, else -1.
func (s *preader) offset(b []byte) int64 {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.inUse {
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(c.buf)))
		if p >= lo+uintptr(c.lo) && p < lo+uintptr(c.streamHeadEnd()) {
			return c.base() + int64(p-lo)
		}
	}
	return -1
}
