package bpfunwind

import (
	"fmt"
	"os"
	"os/exec"
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

// manyPrograms builds k static programs of manyFuncs and returns their
// paths and the most rows one has.
func manyPrograms(t *testing.T, k int) ([]string, int) {
	t.Helper()
	dir := t.TempDir()
	var exes []string
	var most int
	for i := 0; i < k; i++ {
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
	return exes, most
}

// loadSmall loads the unwinder, sampling, with a rows map of rows (and
// files loaded in the background, as the agent has them, if background).
func loadSmall(t *testing.T, rows uint32, background bool) *Unwinder {
	t.Helper()
	u, err := Load(Options{Filter: true, LoadInBackground: background, Sizes: Sizes{Rows: rows, Stacks: 4096, Counts: 16384, KStacks: 4096}})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() { u.Close() })
	if err := u.OnCPU(999); err != nil {
		t.Fatal(err)
	}
	return u
}

// startTraced starts exe, describes it and has the program walk it.
func startTraced(t *testing.T, u *Unwinder, exe string) *exec.Cmd {
	t.Helper()
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
	return cmd
}

// sampleUntil reads pid's stacks until want samples complete (or limit
// passed), and returns the samples, those complete and the ends.
func sampleUntil(t *testing.T, u *Unwinder, pid int, want uint64, limit time.Duration) (total, complete uint64, ends map[End]uint64) {
	t.Helper()
	ends = map[End]uint64{}
	deadline := time.Now().Add(limit)
	for complete < want && time.Now().Before(deadline) {
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
	return total, complete, ends
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
	exes, most := manyPrograms(t, 3)
	// Room for one program and the vDSO, not for two programs.
	size := uint32(most*3/2 + 100)
	u := loadSmall(t, size, false)
	t.Logf("programs of up to %d rows, a rows map of %d", most, size)
	for _, exe := range exes {
		cmd := startTraced(t, u, exe)
		total, complete, ends := sampleUntil(t, u, cmd.Process.Pid, 200, 15*time.Second)
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

// TestEvictedFileReloaded has a running program's file evicted by a
// second program's, then ends the second: the first program's walks,
// which end file-not-loaded meanwhile, must ask for it again and be
// complete again. Without that, they end file-not-loaded for good.
func TestEvictedFileReloaded(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("BPF needs root (or CAP_BPF and CAP_PERFMON)")
	}
	exes, most := manyPrograms(t, 2)
	u := loadSmall(t, uint32(most*3/2+100), true) // the agent's way: the loader goroutines reload
	a := startTraced(t, u, exes[0])
	if _, c, ends := sampleUntil(t, u, a.Process.Pid, 50, 15*time.Second); c < 50 {
		t.Fatalf("first program: %d samples complete in 15 s, want 50 (ends %v)", c, ends)
	}
	b := startTraced(t, u, exes[1]) // evicts the first program's rows
	_, cb, ends := sampleUntil(t, u, b.Process.Pid, 50, 15*time.Second)
	b.Process.Kill()
	b.Wait()
	if cb < 50 || u.Rows().Evictions == 0 {
		t.Fatalf("second program: %d samples complete (ends %v) after %d evictions, want 50 after some", cb, ends, u.Rows().Evictions)
	}
	total, complete, ends := sampleUntil(t, u, a.Process.Pid, 200, 20*time.Second)
	t.Logf("first program after the second: %d samples, %d complete, ends %v; %d evictions", total, complete, ends, u.Rows().Evictions)
	if complete < 200 {
		t.Errorf("first program: %d samples complete in 20 s once its file was evicted, want 200 (ends %v)", complete, ends)
	}
}

// TestReusable picks the file asked for longest ago among those no
// process maps, none busy, loading or asked for in reuseAge.
func TestReusable(t *testing.T) {
	p := newRowPool(1000, func(uint32) (uint64, bool) { return 0, true }, func(uint32) error { return nil })
	now := uint64(10 * reuseAge)
	p.now = func() uint64 { return now }
	add := func(idx uint32, asked uint64) *fileState {
		st := p.state(idx, nil)
		st.asked = asked
		return st
	}
	add(0, now-2*reuseAge).users[7] = true // mapped
	add(1, now-3*reuseAge).pending = 1     // loading
	add(2, now-reuseAge/2)                 // asked for lately
	add(3, now-4*reuseAge)                 // named by a description
	add(4, now-2*reuseAge)
	add(5, now-3*reuseAge)
	if idx, ok := p.reusable(map[uint32]bool{3: true}); !ok || idx != 5 {
		t.Fatalf("reusable = %d, %v, want 5", idx, ok)
	}
	delete(p.files, 4)
	delete(p.files, 5)
	if idx, ok := p.reusable(map[uint32]bool{3: true}); ok {
		t.Fatalf("reusable = %d with none unused, want none", idx)
	}
}

// TestFileIndexesReused runs two programs one after the other with every
// file index taken once the first exited: the second must get the first's
// index and be unwound in the kernel. Without reuse, its walks end
// file-not-loaded (the files map is full).
func TestFileIndexesReused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("BPF needs root (or CAP_BPF and CAP_PERFMON)")
	}
	exes, _ := manyPrograms(t, 2)
	u := loadSmall(t, 1<<16, false)
	a := startTraced(t, u, exes[0])
	if _, c, ends := sampleUntil(t, u, a.Process.Pid, 50, 15*time.Second); c < 50 {
		t.Fatalf("first program: %d samples complete in 15 s, want 50 (ends %v)", c, ends)
	}
	a.Process.Kill()
	a.Wait()
	// Forgotten once its exit is noticed and two reads have passed.
	deadline := time.Now().Add(15 * time.Second)
	for {
		u.mu.Lock()
		_, described := u.described[a.Process.Pid]
		u.mu.Unlock()
		if !described {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first program's exit was not noticed in 15 s")
		}
		u.Read()
		time.Sleep(50 * time.Millisecond)
	}
	u.mu.Lock()
	u.maxFiles = len(u.files) // every index taken
	real := u.pool.now
	u.pool.now = func() uint64 { return real() + 2*reuseAge } // a minute on
	u.mu.Unlock()
	b := startTraced(t, u, exes[1])
	total, complete, ends := sampleUntil(t, u, b.Process.Pid, 200, 15*time.Second)
	b.Process.Kill()
	b.Wait()
	rs := u.Rows()
	t.Logf("second program: %d samples, %d complete, ends %v; %d indexes reused, %d of %d taken; notes %v", total, complete, ends, rs.Reused, rs.Files, u.maxFiles, u.Notes())
	if rs.Reused == 0 || rs.Files > u.maxFiles {
		t.Errorf("%d file indexes reused, %d of %d taken: want one reused", rs.Reused, rs.Files, u.maxFiles)
	}
	if complete < 200 {
		t.Errorf("second program: %d samples complete in 15 s with every file index taken, want 200 (ends %v)", complete, ends)
	}
}
