package live

import (
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/target"
)

// ReadBatch performs every read with as few process_vm_readv calls as
// IOV_MAX allows (one per 1024 reads), spread over up to GOMAXPROCS
// threads when there are several such calls. A read that ends at an
// unreadable page stops its call; the next call starts with the
// following read.
func (r *Reader) ReadBatch(reads []Read) {
	chunks := (len(reads) + iovMax - 1) / iovMax
	workers := min(chunks, runtime.GOMAXPROCS(0), 4)
	if workers <= 1 {
		r.readRange(reads)
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c := int(next.Add(1) - 1)
				if c >= chunks {
					return
				}
				r.readRange(reads[c*iovMax : min(len(reads), (c+1)*iovMax)])
			}
		}()
	}
	wg.Wait()
}

// readRange performs reads (at most iovMax of them per call).
func (r *Reader) readRange(reads []Read) {
	local := make([]unix.Iovec, 0, min(len(reads), iovMax))
	remote := make([]unix.RemoteIovec, 0, min(len(reads), iovMax))
	for i := 0; i < len(reads); {
		hi := min(len(reads), i+iovMax)
		local, remote = local[:0], remote[:0]
		for k := i; k < hi; k++ {
			rd := &reads[k]
			rd.N = 0
			var l unix.Iovec
			if len(rd.Buf) > 0 {
				l.Base = &rd.Buf[0]
			}
			l.SetLen(len(rd.Buf))
			local = append(local, l)
			remote = append(remote, unix.RemoteIovec{Base: uintptr(rd.Addr), Len: len(rd.Buf)})
		}
		got, _ := processVMReadv(r.tid, local, remote)
		k := i
		for ; k < hi; k++ {
			take := min(got, len(reads[k].Buf))
			got -= take
			reads[k].N = take
			if take < len(reads[k].Buf) {
				break
			}
		}
		i = min(k+1, hi) // past the read that stopped short, or the whole chunk
	}
}

// ReadMemory implements target.Memory with one read.
func (r *Reader) ReadMemory(addr uint64, p []byte) error {
	rd := []Read{{Addr: addr, Buf: p}}
	r.ReadBatch(rd)
	if rd[0].N != len(p) {
		return &target.MemoryError{Addr: addr + uint64(rd[0].N)}
	}
	return nil
}

// memTID is a thread whose id process_vm_readv can use: the main thread
// unless it has exited.
func (s *session) memTID() int {
	tid := 0
	for _, th := range s.threads {
		if th.stopped && th.err == nil && (tid == 0 || th.tid == s.pid) {
			tid = th.tid
		}
	}
	if tid == 0 {
		tid = s.pid
	}
	return tid
}
