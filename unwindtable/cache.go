package unwindtable

import (
	"sync"

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

	mu      sync.Mutex
	entries map[string]*cacheEntry
	saving  sync.WaitGroup
}

// Wait returns when the tables Get is writing (see SaveLater) are written.
func (c *Cache) Wait() { c.saving.Wait() }

type cacheEntry struct {
	once sync.Once
	t    *Table
	err  error
}

// Get returns the table for key, calling build the first time the key is
// seen. A build error is cached too: a broken object is not parsed again.
func (c *Cache) Get(key string, build func() (*Table, error)) (*Table, error) {
	c.mu.Lock()
	if c.entries == nil {
		c.entries = map[string]*cacheEntry{}
	}
	e := c.entries[key]
	if e == nil {
		e = &cacheEntry{}
		c.entries[key] = e
	}
	c.mu.Unlock()
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
			cachefile.Note(save(c.Dir, rel, key, e.t), "table not saved")
		}
	})
	return e.t, e.err
}

// Len returns the number of cached keys.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
