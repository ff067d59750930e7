package unwindtable

import (
	"fmt"
	"path/filepath"
	"sync"

	"github.com/rewindstack/rewind/cfi"
	"github.com/rewindstack/rewind/regs"

	"github.com/rewindstack/rewind/internal/cachefile"
)

// Cache holds compiled tables by key (an object's build-id, or its path and
// identity when it has none), so every mapping of the same object in a
// process, and every snapshot taken later, shares one table. Builds for the
// same key run once; concurrent callers wait for the first.
//
// With Dir set, tables of objects keyed by build-id and content are also
// kept in files under Dir/tables (see package cachefile: checksummed,
// never through a symbolic link, only in directories of the current user)
// and read back by later processes: a compiled table is a
// few hundred kilobytes that load in well under a millisecond, where
// compiling libc's CFI takes milliseconds.
type Cache struct {
	// Dir is the persistent cache directory; "" keeps tables in memory
	// only. Set it before the first Get.
	Dir string
	// SaveLater has Get write a table it built to Dir in the background,
	// so that the caller unwinds on meanwhile; Wait waits for those
	// writes. A dump sets it: writing libc's table (120 KB, directories
	// made) took 0.5 to 0.85 ms of its unwinding.
	SaveLater bool
	// Partial asks for partial tables where an object allows them: set,
	// target.Module.Table calls GetPartial for an object whose only CFI
	// is a searchable .eh_frame. A dump sets it.
	Partial bool

	mu       sync.Mutex
	entries  map[string]*cacheEntry
	saving   sync.WaitGroup
	partials []savedPartial // made by GetPartial, saved by Wait
}

// savedPartial is a partial table and the cache file it is kept in.
type savedPartial struct {
	rel, key string
	t        *Table
}

// Wait saves the partial tables that grew (see GetPartial) and returns
// when they and the tables Get is writing (see SaveLater) are written.
func (c *Cache) Wait() {
	c.mu.Lock()
	ps := c.partials
	c.partials = nil
	c.mu.Unlock()
	for _, p := range ps {
		if !p.t.Changed() {
			continue
		}
		c.saving.Add(1)
		go func() {
			defer c.saving.Done()
			b, err := p.t.MarshalPartial()
			if err == nil {
				err = cachefile.Write(c.Dir, p.rel, partialMagic+p.key, b)
			}
			cachefile.Note(err, "partial table not saved")
		}()
	}
	c.saving.Wait()
}

// GetPartial returns the table for key like Get, but for an object whose
// table is not in the cache it returns a partial table (see NewPartial)
// that compiles only the FDEs lookups ask for, instead of building the
// whole table: hdr and eh are the object's .eh_frame_hdr and .eh_frame,
// its only CFI. With Dir set, the FDEs an earlier run compiled are read
// back from a file of their own (a full table, written by a command that
// built one, is preferred), and Wait saves the table again when it grew.
// A dump uses it: it looks up a few dozen addresses.
func (c *Cache) GetPartial(key string, arch regs.Arch, hdr *cfi.EhFrameHdr, eh *cfi.Section) (*Table, error) {
	e := c.entry(key)
	e.once.Do(func() {
		rel := c.persisted(key)
		if rel == "" {
			e.t = NewPartial(arch, hdr, eh)
			return
		}
		if t, err := load(c.Dir, rel, key); err == nil {
			e.t = t
			return
		}
		prel := rel + "-partial"
		data, err := cachefile.Read(c.Dir, prel, partialMagic+key, maxTableFile)
		if err == nil {
			e.t, err = UnmarshalPartial(data, hdr, eh)
			if err != nil {
				err = fmt.Errorf("%s: %w", filepath.Join(c.Dir, prel), err)
			}
		}
		cachefile.Note(err, "table rebuilt")
		if e.t == nil {
			e.t = NewPartial(arch, hdr, eh)
		}
		c.mu.Lock()
		c.partials = append(c.partials, savedPartial{prel, key, e.t})
		c.mu.Unlock()
	})
	return e.t, e.err
}

// entry returns key's entry, made on first use.
func (c *Cache) entry(key string) *cacheEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]*cacheEntry{}
	}
	e := c.entries[key]
	if e == nil {
		e = &cacheEntry{}
		c.entries[key] = e
	}
	return e
}

type cacheEntry struct {
	once sync.Once
	t    *Table
	err  error
}

// Get returns the table for key, calling build the first time the key is
// seen. A build error is cached too: a broken object is not parsed again.
func (c *Cache) Get(key string, build func() (*Table, error)) (*Table, error) {
	e := c.entry(key)
	e.once.Do(func() {
		rel := c.persisted(key)
		if rel != "" {
			t, err := load(c.Dir, rel, key)
			if err == nil {
				e.t = t
				return
			}
			cachefile.Note(err, "table rebuilt")
		}
		e.t, e.err = build()
		if rel != "" && e.err == nil {
			if c.SaveLater {
				c.saving.Add(1)
				go func(t *Table) {
					defer c.saving.Done()
					cachefile.Note(save(c.Dir, rel, key, t), "table not saved")
				}(e.t)
				return
			}
			err := save(c.Dir, rel, key, e.t)
			cachefile.Note(err, "table not saved")
			if err == nil && e.t.Bytes() >= reloadMin {
				// The table as saved is used, mapped from its file:
				// the built one, in the heap, is dropped (see
				// UnmarshalBinary).
				if t, err := load(c.Dir, rel, key); err == nil {
					e.t = t
				}
			}
		}
	})
	return e.t, e.err
}

// reloadMin is the size of a table from which Get, having saved a table
// it built, uses the saved file (mapped) instead of the built copy: the
// size from which the cache's files are mapped (cachefile.Read), and a
// table of that size takes well under a millisecond to read back. The
// first report of a 2.2 GB system-wide recording beside a build, which
// built every table, peaked at 228 MB of anonymous memory with the
// built copies kept.
const reloadMin = 64 << 10

// Len returns the number of cached keys.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
