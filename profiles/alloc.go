package profiles

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// sampleSlabSize is the number of Samples allocated at once: one
// allocation per sample was a third of reading a perf.data file.
const sampleSlabSize = 256

// newSample returns a zero Sample carved from a slab.
func (c *Collector) newSample() *Sample {
	if len(c.sampleSlab) == 0 {
		c.sampleSlab = make([]Sample, sampleSlabSize)
	}
	s := &c.sampleSlab[0]
	c.sampleSlab = c.sampleSlab[1:]
	return s
}

// mapCacheFile maps a cache file read-only; release unmaps it. Reading a
// 4 MB kernel symbol cache into the heap cost 2 ms of rewind report (page
// faults on fresh memory); its pages are in the page cache, and mapping
// them costs nothing until a lookup touches one. Cache files are replaced
// by rename, never rewritten in place, so the mapping stays valid.
func mapCacheFile(path string) (data []byte, release func(), err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !st.Mode().IsRegular() || st.Size() == 0 || st.Size() > 1<<30 {
		return nil, nil, fmt.Errorf("%s: not a cache file", path)
	}
	data, err = unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		return nil, nil, err
	}
	return data, func() { unix.Munmap(data) }, nil
}
