package live

import "sort"

// BatchReader reads batches of ranges: a Reader, or a Coalescing over one.
type BatchReader interface {
	ReadBatch(reads []Read)
}

// Coalescing reads ranges that lie close together with one iovec each
// (into a scratch buffer it keeps) and copies the pieces out: each iovec
// of process_vm_readv costs about as much as copying a few kilobytes, and
// runtimes allocate what a capture reads next to each other (goroutine
// stacks in the Go runtime's stack spans, Tarantool's fibers in its
// mempools).
type Coalescing struct {
	R   BatchReader
	Gap uint64 // the most unwanted bytes read between two ranges

	scratch []byte
	order   []int
	spans   []Read
}

// ReadBatch reads reads through c.R, merged.
func (c *Coalescing) ReadBatch(reads []Read) {
	c.order = c.order[:0]
	for i := range reads {
		reads[i].N = 0
		if len(reads[i].Buf) > 0 && reads[i].Addr+uint64(len(reads[i].Buf)) > reads[i].Addr {
			c.order = append(c.order, i)
		}
	}
	sort.Slice(c.order, func(a, b int) bool { return reads[c.order[a]].Addr < reads[c.order[b]].Addr })
	type span struct{ lo, hi uint64 }
	var spans []span
	total := 0
	for _, i := range c.order {
		lo := reads[i].Addr
		hi := lo + uint64(len(reads[i].Buf))
		if n := len(spans); n > 0 && lo <= spans[n-1].hi+c.Gap && hi-spans[n-1].lo <= 4<<20 {
			if hi > spans[n-1].hi {
				total += int(hi - spans[n-1].hi)
				spans[n-1].hi = hi
			}
			continue
		}
		spans = append(spans, span{lo, hi})
		total += int(hi - lo)
	}
	if cap(c.scratch) >= total {
		c.scratch = c.scratch[:total]
	} else {
		c.scratch = make([]byte, total, total+total/4+64<<10)
	}
	c.spans = c.spans[:0]
	off := 0
	for _, sp := range spans {
		n := int(sp.hi - sp.lo)
		c.spans = append(c.spans, Read{Addr: sp.lo, Buf: c.scratch[off : off+n : off+n]})
		off += n
	}
	c.R.ReadBatch(c.spans)
	j := 0
	for _, i := range c.order {
		r := &reads[i]
		for j < len(c.spans) && c.spans[j].Addr+uint64(len(c.spans[j].Buf)) <= r.Addr {
			j++
		}
		if j == len(c.spans) || r.Addr < c.spans[j].Addr {
			continue
		}
		sp := &c.spans[j]
		o := int(r.Addr - sp.Addr)
		if got := sp.N - o; got > 0 {
			r.N = copy(r.Buf, sp.Buf[o:o+min(got, len(r.Buf))])
		}
	}
}

// Prepare allocates the scratch buffer for batches of up to n bytes and
// faults its pages in, so that a batch read in a capture's pause does not
// fault (a page fault costs microseconds, more in a virtual machine).
func (c *Coalescing) Prepare(n int) {
	c.scratch = make([]byte, 0, n)
	b := c.scratch[:n]
	for i := 0; i < n; i += 4096 {
		b[i] = 1
	}
}

// Reuse takes prev's scratch buffer for c's next batch (prev must not be
// used again).
func (c *Coalescing) Reuse(prev *Coalescing) { c.scratch = prev.scratch[:0] }
