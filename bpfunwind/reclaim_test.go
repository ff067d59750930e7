package bpfunwind

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/rewindstack/rewind/target"
)

// manyFuncs is a C program of n small functions with frames of their own
// (a few rows each), all called in a loop, its results mixed with seed so
// that each build is another file (another build-id).
func manyFuncs(n, seed int) string {
	var b strings.Builder
	b.WriteString("#include <stdio.h>\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "__attribute__((noinline)) long f%d(long x) { volatile long a[3]; a[0] = x; a[1] = %d; return a[0] * a[1] + %d; }\n", i, i+1, seed)
	}
	b.WriteString("long (*const tab[])(long) = {")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "f%d,", i)
	}
	b.WriteString("};\nint main(void) {\n\tputs(\"ready\");\n\tfflush(stdout);\n\tlong s = 0;\n")
	b.WriteString("\tfor (;;)\n\t\tfor (unsigned i = 0; i < sizeof tab / sizeof tab[0]; i++)\n\t\t\ts = tab[i](s);\n}\n")
	return b.String()
}

// TestRowsReclaimed runs three programs one after another (each killed
// before the next starts) with a rows map that holds one program's rows
// and half another's: every one must be unwound in the kernel, which
// needs the rows of those before it taken back. Without reclaiming, the
// second program's walks end file-not-loaded.
func TestRowsReclaimed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("BPF needs root (or CAP_BPF and CAP_PERFMON)")
	}
	dir := t.TempDir()
	var exes []string
	var most int
	for i := 0; i < 3; i++ {
		src := filepath.Join(dir, fmt.Sprintf("many%d.c", i))
		if err := os.WriteFile(src, []byte(manyFuncs(1500, i)), 0o644); err != nil {
			t.Fatal(err)
		}
		exe := filepath.Join(dir, fmt.Sprintf("many%d", i))
		// Static: each program's rows are its own file's, without
		// libraries shared between them.
		build(t, dir, "gcc", "-O1", "-static", "-o", exe, src)
		exes = append(exes, exe)
		mod := (&target.Objects{}).Module(exe)
		tab, err := mod.Table()
		if err != nil {
			t.Fatal(err)
		}
		most = max(most, len(CompileRows(tab, Marks(mod))))
	}
	// Room for one program and the vDSO, not for two programs.
	size := uint32(most*3/2 + 100)
	u, err := Load(Options{Filter: true, Sizes: Sizes{Rows: size, Stacks: 4096, Counts: 16384, KStacks: 4096}})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	defer u.Close()
	t.Logf("programs of up to %d rows, a rows map of %d", most, size)
	if err := u.OnCPU(999); err != nil {
		t.Fatal(err)
	}
	for _, exe := range exes {
		cmd, _ := startLines(t, exe)
		pid := cmd.Process.Pid
		// Described (its rows loaded) before it is sampled.
		if err := u.Describe(pid); err != nil {
			t.Fatal(err)
		}
		one := uint8(1)
		if err := u.objs.Pids.Update(uint32(pid), one, ebpf.UpdateAny); err != nil {
			t.Fatal(err)
		}
		var total, complete uint64
		ends := map[End]uint64{}
		deadline := time.Now().Add(15 * time.Second)
		for total < 200 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			stacks, err := u.Read()
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range stacks {
				if s.PID != pid {
					continue
				}
				total += s.Value
				ends[s.End] += s.Value
				if s.End.Complete() {
					complete += s.Value
				}
			}
		}
		cmd.Process.Kill()
		cmd.Wait()
		rs := u.Rows()
		t.Logf("%s: %d samples, %d complete, ends %v; rows %d of %d used, %d evictions; notes %v", filepath.Base(exe), total, complete, ends, rs.Used, rs.Total, rs.Evictions, u.Notes())
		if total < 50 {
			t.Fatalf("%s: %d samples in 15 s, want 50", exe, total)
		}
		if complete*100 < total*95 {
			t.Errorf("%s: %d of %d samples complete, want >= 95%%", filepath.Base(exe), complete, total)
		}
	}
	if rs := u.Rows(); rs.Evictions < 2 || rs.Used > rs.Total {
		t.Errorf("rows %d of %d used after %d evictions, want at least 2", rs.Used, rs.Total, rs.Evictions)
	}
}
