package live

// Reader reads a stopped process's memory during a capture (see
// Options.During).
type Reader struct {
	tid     int
	threads []StoppedThread
}

// StoppedThread is a thread stopped for a capture, as Options.During
// sees it.
type StoppedThread struct {
	TID int
	// TP is the thread pointer (fs_base on amd64, 0 where unknown): the
	// thread's libc TCB (glibc's pointer guard is at +0x30, and
	// pthread_self() is TP).
	TP uint64
}

// Threads returns the stopped threads during a capture (the main thread
// first when it is stopped); nil outside one.
func (r *Reader) Threads() []StoppedThread { return r.threads }

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

// Reader returns a Reader of the snapshot's process that knows its
// threads, as Options.During gets one: inside WithStopped's function it
// reads the stopped process; after Capture its reads race with the
// running process.
func (s *Snapshot) Reader() *Reader {
	r := &Reader{tid: s.PID}
	for _, th := range s.Threads {
		if th.Err == nil {
			r.threads = append(r.threads, StoppedThread{TID: th.TID, TP: th.TP})
		}
	}
	return r
}
