package goroutines

import (
	"sort"

	"github.com/rewindstack/rewind/live"
)

// coalescing reads ranges that lie close together with one iovec each
// (into scratch) and copies the pieces out: each iovec of process_vm_readv
// costs about as much as copying a few kilobytes, and goroutine stacks lie
// next to each other in the runtime's stack spans.
type coalescing struct {
	rd      batchReader
	gap     uint64 // the most unwanted bytes read between two ranges
	scratch []byte
	order   []int
	spans   []live.Read
}

// ReadBatch implements batchReader.
func (c *coalescing) ReadBatch(reads []live.Read) {
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
		if n := len(spans); n > 0 && lo <= spans[n-1].hi+c.gap && hi-spans[n-1].lo <= 4<<20 {
			if hi > spans[n-1].hi {
				total += int(hi - spans[n-1].hi)
				spans[n-1].hi = hi
			}
			continue
		}
		spans = append(spans, span{lo, hi})
		total += int(hi - lo)
	}
	c.scratch = reuse(c.scratch, total)
	c.spans = c.spans[:0]
	off := 0
	for _, sp := range spans {
		n := int(sp.hi - sp.lo)
		c.spans = append(c.spans, live.Read{Addr: sp.lo, Buf: c.scratch[off : off+n : off+n]})
		off += n
	}
	c.rd.ReadBatch(c.spans)
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
