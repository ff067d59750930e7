package bpfunwind

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestLoadsOnThisKernel loads the programs and creates their maps as the
// agent (Host sizes) and record (Process sizes, a process filter) do, with
// the kernel's own choice of allocation and with every hash map
// preallocated (as before 6.1), and attaches them: the on-CPU sampler,
// the off-CPU tracer and the process and mapping hooks. It needs no
// target process, compiler or debug files, so scripts/verify-old-kernel.sh
// runs it, with TestVerifierHeadroom, in a virtual machine booting an
// older kernel.
func TestLoadsOnThisKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loading BPF programs needs root")
	}
	for _, c := range []struct {
		name    string
		sizes   Sizes
		filter  bool
		prealoc bool
	}{{"agent", Host, false, false}, {"record", Process, true, false},
		{"agent-prealloc", Host, false, true}, {"record-prealloc", Process, true, true}} {
		t.Run(c.name, func(t *testing.T) {
			forcePrealloc = c.prealoc
			defer func() { forcePrealloc = false }()
			start := time.Now()
			u, err := Load(Options{Sizes: c.sizes, Filter: c.filter})
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			defer u.Close()
			took := time.Since(start)
			if err := u.OnCPU(99); err != nil {
				t.Errorf("OnCPU: %v", err)
			}
			if err := u.OffCPU(time.Millisecond); err != nil {
				t.Errorf("OffCPU: %v", err)
			}
			notes := u.Notes()
			t.Logf("loaded in %v; notes %v", took.Round(time.Millisecond), notes)
			for n := range notes {
				if strings.HasPrefix(n, "unmapping is not followed") {
					t.Errorf("a program not attached: %s", n)
				}
			}
		})
	}
}
