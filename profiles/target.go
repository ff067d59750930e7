package profiles

import (
	"github.com/rewindstack/rewind/target"
)

// Target makes a target of one sample taken from c: the sampled thread's
// user registers over the stack bytes the kernel copied, in the address
// space its process had when the sample was taken. It is nil for a sample
// without user registers (a kernel thread's).
func (c *Collector) Target(s *Sample) *target.Target {
	if !s.HasRegs || s.space == nil {
		return nil
	}
	r := s.Regs()
	return &target.Target{
		PID:      s.PID,
		Source:   "perf sample",
		Arch:     c.Arch,
		Contexts: []target.Context{target.Thread(s.TID, s.comm, r)},
		Mem:      &target.Snapshot{Regions: s.regions(nil)},
		Space:    c.addressSpace(s.space),
	}
}
