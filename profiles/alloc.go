package profiles

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
