package live

// Reader reads a stopped process's memory during a capture (see
// Options.During).
type Reader struct {
	tid int
	tps []uint64
}

// ThreadPointers returns the thread pointers (fs_base on amd64) of the
// stopped threads that have one, during a capture; nil outside one. Each
// points at the thread's libc TCB (glibc's pointer guard is at +0x30).
func (r *Reader) ThreadPointers() []uint64 { return r.tps }

// NewReader returns a Reader of process pid's memory outside a capture:
// its reads race with the running process.
func NewReader(pid int) *Reader { return &Reader{tid: pid} }

// Read is one request of a batch: Buf is filled from Addr, and N is set
// to the number of bytes read (short when an unreadable page ends it).
type Read struct {
	Addr uint64
	Buf  []byte
	N    int
}
