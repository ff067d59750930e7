package luajit

import "github.com/rewindstack/rewind/target"

// pageCache is a Memory that reads its fallback a page at a time and
// keeps the pages: a walk of thousands of coroutines reads many small
// pieces of the same heap pages, one system call each on a live process
// without it. It keeps at most maxPages; past that it reads directly.
type pageCache struct {
	mem   target.Memory
	pages map[uint64][]byte // nil: not readable as a whole
}

const (
	pageSize = 4096
	maxPages = 1 << 14 // 64 MiB
)

func newPageCache(mem target.Memory) *pageCache {
	return &pageCache{mem: mem, pages: map[uint64][]byte{}}
}

func (c *pageCache) ReadMemory(addr uint64, p []byte) error {
	if addr+uint64(len(p)) < addr || len(p) > pageSize {
		return c.mem.ReadMemory(addr, p)
	}
	for done := 0; done < len(p); {
		a := addr + uint64(done)
		pa := a &^ (pageSize - 1)
		pg, ok := c.pages[pa]
		if !ok {
			if len(c.pages) >= maxPages {
				return c.mem.ReadMemory(addr, p)
			}
			pg = make([]byte, pageSize)
			if c.mem.ReadMemory(pa, pg) != nil {
				pg = nil
			}
			c.pages[pa] = pg
		}
		if pg == nil {
			// Part of the page is unreadable: the piece is read as asked.
			return c.mem.ReadMemory(addr, p)
		}
		done += copy(p[done:], pg[a-pa:])
	}
	return nil
}
