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
	if n := len(c.freeSamples); n > 0 {
		s := c.freeSamples[n-1]
		c.freeSamples = c.freeSamples[:n-1]
		return s
	}
	if len(c.sampleSlab) == 0 {
		c.sampleSlab = make([]Sample, sampleSlabSize)
	}
	s := &c.sampleSlab[0]
	c.sampleSlab = c.sampleSlab[1:]
	return s
}

// maxFreeSamples bounds the samples kept for reuse.
const maxFreeSamples = 1 << 14

// recycle takes back samples that were unwound into a profile and that
// nothing looks at any more (Builder.Add returned), to make the next
// samples of: a report's heap is not collected, and the Samples of a 336
// MB recording were 13.6 MB of its 49 MB of fresh memory, every page of
// it a page fault. Their kernel and user callchains' memory is reused
// too (see AddSample).
func (c *Collector) recycle(samples []*Sample) {
	for _, s := range samples {
		if len(c.freeSamples) >= maxFreeSamples {
			return
		}
		*s = Sample{Kernel: s.Kernel[:0], UserFP: s.UserFP[:0]}
		c.freeSamples = append(c.freeSamples, s)
	}
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
