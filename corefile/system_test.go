package corefile

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
)

// threadsProgram starts two threads, each with a recognisable stack buffer,
// prints every thread id and the addresses the test checks, prints "ready",
// and then either waits (for gcore) or aborts (for a kernel core).
const threadsProgram = `
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

char pattern[64] = "REWIND-GLOBAL-PATTERN-0123456789abcdefghijklmnopqrstuvwxyz!";
static pthread_barrier_t started;
static pthread_mutex_t out = PTHREAD_MUTEX_INITIALIZER;

static void *worker(void *arg) {
	char buf[48];
	memset(buf, 'A' + (int)(long)arg, sizeof buf);
	pthread_mutex_lock(&out);
	printf("tid %ld\nstack %p %c\n", (long)syscall(SYS_gettid), (void *)buf, buf[0]);
	fflush(stdout);
	pthread_mutex_unlock(&out);
	pthread_barrier_wait(&started);
	for (;;)
		pause();
	return (void *)buf[1];
}

int main(int argc, char **argv) {
	pthread_t t[2];
	pthread_barrier_init(&started, 0, 3);
	printf("main %ld\nglobal %p\nabort %p\n", (long)syscall(SYS_gettid), (void *)pattern, (void *)abort);
	fflush(stdout);
	for (long i = 0; i < 2; i++)
		pthread_create(&t[i], 0, worker, (void *)i);
	pthread_barrier_wait(&started);
	printf("ready\n");
	fflush(stdout);
	if (argc > 1 && strcmp(argv[1], "abort") == 0)
		abort();
	for (;;)
		pause();
}
`

// need skips the test unless every named tool is installed.
func need(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed: %v", tool, err)
		}
	}
}

// progInfo is what threadsProgram printed.
type progInfo struct {
	mainTID int
	tids    []int // all threads, main first
	global  uint64
	abort   uint64
	stacks  map[uint64]byte // stack buffer address -> fill byte
}

// buildProgram compiles threadsProgram into dir.
func buildProgram(t *testing.T, dir string) string {
	need(t, "gcc")
	src := filepath.Join(dir, "threads.c")
	if err := os.WriteFile(src, []byte(threadsProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "threads")
	if out, err := exec.Command("gcc", "-O1", "-g", "-pthread", "-o", exe, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return exe
}

// readInfo parses the program's output up to "ready".
func readInfo(t *testing.T, r io.Reader) *progInfo {
	info := &progInfo{stacks: map[uint64]byte{}}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "ready":
			sort.Ints(info.tids[1:])
			return info
		case "main":
			info.mainTID, _ = strconv.Atoi(f[1])
			info.tids = append([]int{info.mainTID}, info.tids...)
		case "tid":
			tid, _ := strconv.Atoi(f[1])
			info.tids = append(info.tids, tid)
		case "global":
			info.global = hex64(t, f[1])
		case "abort":
			info.abort = hex64(t, f[1])
		case "stack":
			info.stacks[hex64(t, f[1])] = f[2][0]
		}
	}
	t.Fatalf("program ended before printing ready: %v", sc.Err())
	return nil
}

func hex64(t testing.TB, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	if err != nil {
		t.Fatalf("parsing %q: %v", s, err)
	}
	return v
}

// gcoreDump runs the program, dumps it with gcore while it waits, and kills
// it.
func gcoreDump(t *testing.T, dir, exe string) (string, *progInfo) {
	need(t, "gcore")
	cmd := exec.Command(exe)
	cmd.Dir = dir
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	timer := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	info := readInfo(t, stdout)
	prefix := filepath.Join(dir, "gcore")
	g := exec.Command("gcore", "-o", prefix, strconv.Itoa(cmd.Process.Pid))
	if out, err := g.CombinedOutput(); err != nil {
		t.Fatalf("gcore: %v\n%s", err, out)
	}
	return fmt.Sprintf("%s.%d", prefix, cmd.Process.Pid), info
}

// kernelDump runs the program under "ulimit -c unlimited" and lets it abort,
// returning the core the kernel wrote, or skipping if it cannot.
func kernelDump(t *testing.T, dir, exe string) (string, *progInfo) {
	pattern, err := os.ReadFile("/proc/sys/kernel/core_pattern")
	if err != nil {
		t.Skipf("cannot read core_pattern: %v", err)
	}
	if p := strings.TrimSpace(string(pattern)); strings.HasPrefix(p, "|") || strings.Contains(p, "/") {
		t.Skipf("kernel cores go elsewhere here: core_pattern is %q", p)
	}
	cmd := exec.Command("sh", "-c", `ulimit -c unlimited && exec "$0" abort`, exe)
	cmd.Dir = dir
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	info := readInfo(t, stdout)
	io.Copy(io.Discard, stdout)
	err = cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGABRT {
		t.Fatalf("program did not die of SIGABRT: %v", err)
	}
	if !ws.CoreDump() {
		t.Skipf("the kernel wrote no core (core_pattern %q, status %v); is RLIMIT_CORE capped?", strings.TrimSpace(string(pattern)), err)
	}
	for _, name := range []string{"core", fmt.Sprintf("core.%d", info.mainTID)} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return filepath.Join(dir, name), info
		}
	}
	t.Skipf("the kernel reported a core dump but none is in %s (core_pattern %q)", dir, strings.TrimSpace(string(pattern)))
	return "", nil
}

func TestGcore(t *testing.T) {
	dir := t.TempDir()
	exe := buildProgram(t, dir)
	core, info := gcoreDump(t, dir, exe)
	checkCore(t, exe, core, info, false)
}

func TestKernelCore(t *testing.T) {
	dir := t.TempDir()
	exe := buildProgram(t, dir)
	core, info := kernelDump(t, dir, exe)
	checkCore(t, exe, core, info, true)
}

// checkCore compares a core of threadsProgram with what the program printed
// and with gdb and eu-readelf.
func checkCore(t *testing.T, exe, path string, info *progInfo, kernel bool) {
	c, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t.Logf("%s: %d threads, %d mappings, %d PT_LOADs, auxv %d entries", path, len(c.Threads), len(c.Mappings), len(c.segs), len(c.Auxv))

	if c.Arch != regs.AMD64 || c.PID != info.mainTID || c.Exe != exe || c.Name != "threads" {
		t.Errorf("arch %v pid %d (want %d) exe %q (want %q) name %q", c.Arch, c.PID, info.mainTID, c.Exe, exe, c.Name)
	}
	wantArgs := exe
	if kernel {
		wantArgs += " abort"
	}
	if c.Args != wantArgs {
		t.Errorf("args %q, want %q", c.Args, wantArgs)
	}
	var tids []int
	for _, th := range c.Threads {
		tids = append(tids, th.TID)
	}
	if len(tids) > 0 {
		sort.Ints(tids[1:])
	}
	if fmt.Sprint(tids) != fmt.Sprint(info.tids) {
		t.Errorf("threads %v, program printed %v (main first)", tids, info.tids)
	}
	if kernel && (len(c.Threads) == 0 || c.Threads[0].Signal != int(syscall.SIGABRT)) {
		t.Errorf("first thread should have caught SIGABRT: %+v", c.Threads)
	}
	for _, tag := range []uint64{AtEntry, AtPhdr, AtSysinfoEhdr} {
		if c.Auxv[tag] == 0 {
			t.Errorf("auxv lacks tag %d", tag)
		}
	}
	vdso := make([]byte, 4)
	if err := c.ReadMemory(c.Auxv[AtSysinfoEhdr], vdso); err != nil || string(vdso) != "\x7fELF" {
		t.Errorf("vDSO header %q %v", vdso, err)
	}

	checkRegistersWithGDB(t, exe, path, c)
	checkMappingsWithEuReadelf(t, path, c)

	// A global variable.
	buf := make([]byte, 64)
	if err := c.ReadMemory(info.global, buf); err != nil {
		t.Errorf("global: %v", err)
	} else if want := "REWIND-GLOBAL-PATTERN-0123456789abcdefghijklmnopqrstuvwxyz!"; string(buf) != want+strings.Repeat("\x00", 64-len(want)) {
		t.Errorf("global = %q", buf)
	}
	// Each worker's stack buffer.
	for addr, fill := range info.stacks {
		b := make([]byte, 48)
		if err := c.ReadMemory(addr, b); err != nil {
			t.Errorf("stack %#x: %v", addr, err)
		} else if !bytes.Equal(b, bytes.Repeat([]byte{fill}, 48)) {
			t.Errorf("stack %#x = %q, want %c", addr, b, fill)
		}
	}
	if len(info.stacks) != 2 {
		t.Errorf("program printed %d stacks", len(info.stacks))
	}

	// libc's abort: text the core does not hold, read through NT_FILE and
	// compared with the library file via elfobj.
	if si, _ := c.segmentAt(info.abort); si >= 0 && c.segs[si].filesz > info.abort-c.segs[si].vaddr {
		t.Errorf("libc text at %#x is dumped in the core; the file fallback is not exercised", info.abort)
	}
	m := c.mappingAt(info.abort)
	if m == nil || !strings.Contains(m.Path, "libc.so") {
		t.Fatalf("abort %#x not in a libc mapping: %+v", info.abort, m)
	}
	code := make([]byte, 64)
	if err := c.ReadMemory(info.abort, code); err != nil {
		t.Fatal(err)
	}
	lib, err := elfobj.Open(m.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Close()
	bias, err := lib.Bias(m.Start, m.Offset)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 64)
	if err := lib.ReadVaddr(info.abort-bias, want); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(code, want) {
		t.Errorf("abort code from the core %x, libc file has %x", code, want)
	}
	if name, off, ok := lib.Symbolize(info.abort - bias); name != "abort" || off != 0 || !ok {
		t.Errorf("Symbolize(abort) = %q+%d %v", name, off, ok)
	}

	// One read spanning the executable's dumped header page and its
	// undumped text, compared with the file.
	var first *target.Mapping
	for i := range c.Mappings {
		if c.Mappings[i].Path == exe && c.Mappings[i].Offset == 0 {
			first = &c.Mappings[i]
			break
		}
	}
	if first == nil {
		t.Fatalf("no offset-0 mapping of %s", exe)
	}
	exeBytes, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	span := make([]byte, 0x2000)
	if err := c.ReadMemory(first.Start, span); err != nil {
		t.Errorf("spanning read: %v", err)
	} else if !bytes.Equal(span, exeBytes[:0x2000]) {
		t.Errorf("spanning read differs from the executable's first 0x2000 bytes")
	}

	if err := c.ReadMemory(0x1000, buf[:8]); err == nil || !strings.Contains(err.Error(), "address 0x1000") || !strings.Contains(err.Error(), path) {
		t.Errorf("unmapped read: %v", err)
	}
}

// checkRegistersWithGDB compares rip, rsp and rbp per thread with gdb's
// view of the core.
func checkRegistersWithGDB(t *testing.T, exe, path string, c *Core) {
	if _, err := exec.LookPath("gdb"); err != nil {
		t.Logf("gdb not installed; registers not cross-checked")
		return
	}
	out, err := exec.Command("gdb", "-nx", "-batch", "-ex", "thread apply all info registers rip rsp rbp", exe, path).CombinedOutput()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, out)
	}
	thread := regexp.MustCompile(`^Thread \d+ .*\(LWP (\d+)\)`)
	reg := regexp.MustCompile(`^(rip|rsp|rbp)\s+(0x[0-9a-f]+)`)
	gdbRegs := map[int]map[string]uint64{}
	tid := 0
	for _, line := range strings.Split(string(out), "\n") {
		if m := thread.FindStringSubmatch(line); m != nil {
			tid, _ = strconv.Atoi(m[1])
			gdbRegs[tid] = map[string]uint64{}
		} else if m := reg.FindStringSubmatch(line); m != nil && tid != 0 {
			gdbRegs[tid][m[1]] = hex64(t, m[2])
		}
	}
	if len(gdbRegs) != len(c.Threads) {
		t.Errorf("gdb sees %d threads, we see %d\n%s", len(gdbRegs), len(c.Threads), out)
	}
	dwarf := map[string]int{"rip": regs.AMD64RIP, "rsp": regs.AMD64RSP, "rbp": regs.AMD64RBP}
	t.Logf("gdb: registers of %d threads", len(gdbRegs))
	for _, th := range c.Threads {
		g := gdbRegs[th.TID]
		if len(g) != 3 {
			t.Errorf("gdb printed %v for LWP %d", g, th.TID)
			continue
		}
		for name, n := range dwarf {
			if v, ok := th.Regs.Get(n); !ok || v != g[name] {
				t.Errorf("thread %d %s = %#x, gdb says %#x", th.TID, name, v, g[name])
			}
		}
	}
}

// checkMappingsWithEuReadelf compares Mappings with eu-readelf's rendering
// of the NT_FILE note.
func checkMappingsWithEuReadelf(t *testing.T, path string, c *Core) {
	if _, err := exec.LookPath("eu-readelf"); err != nil {
		t.Logf("eu-readelf not installed (apt-get install elfutils); mappings not cross-checked")
		return
	}
	out, err := exec.Command("eu-readelf", "-n", path).Output()
	if err != nil {
		t.Fatalf("eu-readelf: %v", err)
	}
	re := regexp.MustCompile(`^\s+([0-9a-f]+)-([0-9a-f]+) ([0-9a-f]+) \d+\s+(.+)$`)
	var want []target.Mapping
	for _, line := range strings.Split(string(out), "\n") {
		if m := re.FindStringSubmatch(line); m != nil {
			want = append(want, target.Mapping{Start: hex64(t, m[1]), End: hex64(t, m[2]), Offset: hex64(t, m[3]), Path: m[4]})
		}
	}
	sort.SliceStable(want, func(i, j int) bool { return want[i].Start < want[j].Start })
	// Permissions come from the PT_LOAD that starts where the mapping
	// does (gcore writes none for read-only file text it leaves out).
	out, err = exec.Command("eu-readelf", "-l", path).Output()
	if err != nil {
		t.Fatalf("eu-readelf -l: %v", err)
	}
	load := regexp.MustCompile(`(?m)^\s+LOAD\s+0x[0-9a-f]+\s+0x([0-9a-f]+)\s+0x[0-9a-f]+\s+0x[0-9a-f]+\s+0x[0-9a-f]+\s+([RWE ]+?)\s+0x`)
	perms := map[uint64]string{}
	for _, m := range load.FindAllStringSubmatch(string(out), -1) {
		p := []byte("---p")
		for i, f := range "RWE" {
			if strings.ContainsRune(m[2], f) {
				p[i] = "rwx"[i]
			}
		}
		perms[hex64(t, m[1])] = string(p)
	}
	for i := range want {
		want[i].Perms = perms[want[i].Start]
	}
	t.Logf("eu-readelf: %d NT_FILE mappings, %d PT_LOADs", len(want), len(perms))
	if len(want) == 0 || fmt.Sprint(want) != fmt.Sprint(c.Mappings) {
		t.Errorf("mappings\n got %v\nwant %v", c.Mappings, want)
	}
}

// TestGcoreNotesCut: gcore writes its notes after the memory, so a gcore
// core cut short loses them first. Every thread whose registers are whole
// is still read, and NotesCut says where the notes end and which
// process-wide notes are lost; a cut before any thread's registers is an
// error that says so.
func TestGcoreNotesCut(t *testing.T) {
	dir := t.TempDir()
	exe := buildProgram(t, dir)
	core, _ := gcoreDump(t, dir, exe)
	full, err := Open(core)
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	if _, _, cut := full.NotesCut(); cut || len(full.Threads) < 2 {
		t.Fatalf("the whole core: notes cut %v, %d threads", cut, len(full.Threads))
	}
	b, err := os.ReadFile(core)
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(core)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	// The file offsets of the NT_PRSTATUS notes, walked here apart from
	// the package's parser.
	var prstatus []uint64
	for _, p := range ef.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		for off := p.Off; off+12 <= p.Off+p.Filesz; {
			namesz, descsz, typ := binary.LittleEndian.Uint32(b[off:]), binary.LittleEndian.Uint32(b[off+4:]), binary.LittleEndian.Uint32(b[off+8:])
			if typ == uint32(elf.NT_PRSTATUS) {
				prstatus = append(prstatus, off)
			}
			off += 12 + (uint64(namesz)+3)&^3 + (uint64(descsz)+3)&^3
		}
	}
	if len(prstatus) != len(full.Threads) {
		t.Fatalf("%d NT_PRSTATUS notes, %d threads read", len(prstatus), len(full.Threads))
	}
	for _, keep := range []int{1, len(prstatus) - 1} {
		cut := filepath.Join(dir, fmt.Sprintf("cut%d", keep))
		at := prstatus[keep]
		if err := os.WriteFile(cut, b[:at+40], 0o600); err != nil { // inside thread keep's registers
			t.Fatal(err)
		}
		c, err := Open(cut)
		if err != nil {
			t.Fatalf("cut after %d threads: %v", keep, err)
		}
		if len(c.Threads) != keep {
			t.Errorf("cut after %d threads: %d threads read", keep, len(c.Threads))
		}
		for i := range min(keep, len(c.Threads)) {
			if c.Threads[i].TID != full.Threads[i].TID || c.Threads[i].Regs != full.Threads[i].Regs {
				t.Errorf("cut after %d threads: thread %d differs from the whole core's", keep, i)
			}
		}
		gotAt, missing, ok := c.NotesCut()
		if !ok || gotAt != at || len(missing) != 2 || !strings.Contains(missing[0], "NT_FILE") || !strings.Contains(missing[1], "NT_AUXV") {
			t.Errorf("cut after %d threads: NotesCut() = %#x, %q, %v; want %#x and NT_FILE, NT_AUXV missing", keep, gotAt, missing, ok, at)
		}
		if _, _, bad := c.Truncated(); !bad {
			t.Errorf("cut after %d threads: not reported truncated", keep)
		}
		tg, err := c.Target(&target.Objects{}, exe)
		if err != nil {
			t.Fatalf("cut after %d threads: %v", keep, err)
		}
		// NT_FILE and AT_ENTRY are lost: the program is placed by the
		// build-id of the ELF header the core holds, where it was.
		placed := false
		for _, m := range tg.Space.Mappings() {
			if m.Path == exe && m.Module != nil {
				for _, fm := range full.Mappings {
					if fm.Path == exe && fm.Start <= m.Start && m.End <= fm.End+0x1000 {
						placed = true
					}
				}
			}
		}
		if !placed {
			t.Errorf("cut after %d threads: %s is not mapped where the whole core's NT_FILE says", keep, exe)
		}
		c.Close()
	}
	cut := filepath.Join(dir, "cut0")
	if err := os.WriteFile(cut, b[:prstatus[0]+40], 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Open(cut)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Target(&target.Objects{}, exe); err == nil || !strings.Contains(err.Error(), "before any thread's registers") {
		t.Errorf("cut before any thread: %v", err)
	}
}
