package perfdata

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/internal/hugemem"
)

// Open maps a file, but reads one of up to readLimit bytes into memory
// backed by transparent huge pages instead, with a read on every core,
// when touching the mapping's pages turns out to be costly. On virtual
// machines whose page tables the host shadows, the first touch of each
// page of a file mapping costs 2-4 µs when the page cache holds the file
// in 4 KiB pages, as perf's small writes leave it: touching the 16,000
// pages of a 65 MB recording and unmapping them took 30-40 ms of CPU
// there, against about 20 ms to read it into huge pages (whose faults are
// few and whose unmapping is cheap), and a report of it took 18% less
// time. Where the page cache holds the file in large folios (a file
// written with large writes) the same touches cost 0.15 µs a page, and a
// report of the mapped file took 18% less time than one of the file read.
// So Open first times the touch of 256 pages in the middle of the file.
// Decoding while the reads go on, chunk by chunk, was no faster: the
// reads keep both cores busy.

// probePages is how many pages costlyPages touches, and costlyTouch the
// mean time a touch above which a mapping is costly. The two cases above
// measured 2.2-3.7 µs and 0.14-0.56 µs.
const (
	probePages  = 256
	costlyTouch = time.Microsecond
)

// costlyPages reports whether touching pages of the file mapping data
// costs more than costlyTouch each, measured in its middle. A file too
// small to measure is not costly.
func costlyPages(data []byte) bool {
	const page = 4 << 10
	at := (len(data) / 2) &^ (page - 1)
	if len(data) < 4<<20 || at+probePages*page > len(data) {
		return false
	}
	var sum byte
	start := time.Now()
	for i := range probePages {
		sum += data[at+i*page]
	}
	took := time.Since(start)
	probed.Add(uint32(sum)) // (the reads are not optimized away)
	return took > probePages*costlyTouch
}

// probed receives a sum of the bytes costlyPages read.
var probed atomic.Uint32

// readLimit is the largest file Open reads into memory; a larger one is
// mapped and read as it is used.
const readLimit = 1 << 30

// readable reports whether a file of size bytes may be read whole: huge
// pages can be had, and it is within readLimit and an eighth of the
// machine's memory (unlike the page cache a mapping uses, memory read
// into cannot be reclaimed).
func readable(size int64) bool {
	var si unix.Sysinfo_t
	if size > readLimit || !hugemem.Available() || unix.Sysinfo(&si) != nil {
		return false
	}
	return uint64(size) <= uint64(si.Totalram)*uint64(si.Unit)/8
}

// minReadPart is the least a read goroutine is worth.
const minReadPart = 8 << 20

// readWhole reads the size bytes of fd into huge-page-backed memory
// outside the Go heap (free it with hugemem.Unmap), splitting the reads
// between the cores.
func readWhole(fd *os.File, size int64, path string) ([]byte, error) {
	data, err := hugemem.Map(int(size))
	if err != nil {
		return nil, err
	}
	parts := max(1, min(int64(runtime.GOMAXPROCS(0)), size/minReadPart, 8))
	step := (size/parts + hugemem.Size - 1) &^ (hugemem.Size - 1)
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for i := range parts {
		lo := min(i*step, size)
		hi := min(lo+step, size)
		if i == parts-1 {
			hi = size
		}
		wg.Go(func() {
			got, err := fd.ReadAt(data[lo:hi], lo)
			if int64(got) < hi-lo {
				why := "the file is shorter than when it was opened"
				if err != nil && !errors.Is(err, io.EOF) {
					why = fmt.Sprintf("reading the file: %v", err)
				}
				errs[i] = &FormatError{Pkg: "perfdata", File: path, Offset: uint64(lo) + uint64(got), Msg: why}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			hugemem.Unmap(data)
			return nil, err
		}
	}
	return data, nil
}
