package luajit

import "github.com/rewindstack/rewind/target"

// pageCache is a Memory that reads its fallback a page at a time and
// keeps the pages: a walk of thousands of coroutines reads many small
// pieces of the same heap pages, one system call each on a live process
// without it. It keeps at most maxPages (and a block more); past that it
// reads directly.
type pageCache struct {
	mem   target.Memory
	pages map[uint64][]byte // nil: not readable as a whole

	lastAddr uint64 // the page read last, and its bytes (nil: none)
	last     []byte
}

const (
	pageSize  = 4096
	maxPages  = 1 << 14 // 64 MiB
	blockSize = 64 << 10
)

func newPageCache(mem target.Memory) *pageCache {
	return &pageCache{mem: mem, pages: map[uint64][]byte{}}
}

func (c *pageCache) ReadMemory(addr uint64, p []byte) error {
	if addr+uint64(len(p)) < addr || len(p) > pageSize {
		return c.mem.ReadMemory(addr, p)
	}
	// Most reads fall in the page of the one before.
	if off := addr - c.lastAddr; c.last != nil && addr >= c.lastAddr && off+uint64(len(p)) <= pageSize {
		copy(p, c.last[off:])
		return nil
	}
	for done := 0; done < len(p); {
		a := addr + uint64(done)
		pa := a &^ (pageSize - 1)
		pg, ok := c.pages[pa]
		if !ok {
			if len(c.pages) >= maxPages {
				return c.mem.ReadMemory(addr, p)
			}
			pg = c.fill(pa)
		}
		if pg == nil {
			// Part of the page is unreadable: the piece is read as asked.
			return c.mem.ReadMemory(addr, p)
		}
		c.lastAddr, c.last = pa, pg
		done += copy(p[done:], pg[a-pa:])
	}
	return nil
}

// fill reads the page at pa, with the other pages of its 64 KiB block
// when they are all readable (one system call for sixteen pages on a
// live process: a heap's objects lie close together), and returns it
// (nil: unreadable).
func (c *pageCache) fill(pa uint64) []byte {
	ba := pa &^ (blockSize - 1)
	block := make([]byte, blockSize)
	if c.mem.ReadMemory(ba, block) == nil {
		for off := uint64(0); off < blockSize; off += pageSize {
			if _, ok := c.pages[ba+off]; !ok {
				c.pages[ba+off] = block[off : off+pageSize : off+pageSize]
			}
		}
		return c.pages[pa]
	}
	pg := make([]byte, pageSize)
	if c.mem.ReadMemory(pa, pg) != nil {
		pg = nil
	}
	c.pages[pa] = pg
	return pg
}
