package bpfunwind

import (
	"os"
	"regexp"
	"sort"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"
)

// TestVerifierHeadroom loads the programs with the verifier's statistics
// and checks that each took at most a fifth of the verifier's budget (a
// million instructions processed): older kernels prune states less well
// than this one, and the README promises Linux 5.17.
func TestVerifierHeadroom(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loading BPF programs needs root")
	}
	spec, err := loadUnwind()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range spec.Maps {
		if m.MaxEntries > 4096 && m.Type != ebpf.RingBuf {
			m.MaxEntries = 4096 // small maps: only the programs are verified here
		}
	}
	var objs unwindObjects
	if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}}); err != nil {
		t.Fatal(loadError(err))
	}
	defer objs.Close()
	re := regexp.MustCompile(`processed (\d+) insns`)
	progs := map[string]*ebpf.Program{"on_cpu": objs.OnCpu, "off_cpu": objs.OffCpu, "on_fork": objs.OnFork, "on_exec": objs.OnExec,
		"on_exit": objs.OnExit, "on_munmap": objs.OnMunmap, "on_munmap_exit": objs.OnMunmapExit, "on_mmap": objs.OnMmap, "on_mmap_exit": objs.OnMmapExit, "on_unmapped_area": objs.OnUnmappedArea}
	var names []string
	for n := range progs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		m := re.FindStringSubmatch(progs[n].VerifierLog)
		if m == nil {
			t.Errorf("%s: no statistics in the verifier's log: %q", n, progs[n].VerifierLog)
			continue
		}
		insns, _ := strconv.Atoi(m[1])
		t.Logf("%-15s %7d instructions processed", n, insns)
		if insns > 200000 {
			t.Errorf("%s: the verifier processed %d instructions, want at most 200,000 of its 1,000,000", n, insns)
		}
	}
}
