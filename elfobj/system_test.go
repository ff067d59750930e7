package elfobj

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/readat"
)

const (
	libcPath = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	gdbPath  = "/usr/bin/gdb"
	cc1Path  = "/usr/lib/gcc/x86_64-linux-gnu/12/cc1"
)

// need skips the test unless every named tool is installed.
func need(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed: %v", tool, err)
		}
	}
}

// needFile skips the test unless path exists.
func needFile(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s: %v", path, err)
	}
}

// run runs a command and returns its standard output.
func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// testProgram is a C program with local, global, weak and aliased functions
// that prints runtime addresses and then waits for its standard input to
// close (so the test can read its /proc/PID/maps).
const testProgram = `
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((noinline)) static int helper(int x) { return x * 3 + 1; }
__attribute__((noinline)) int work(int x) { return helper(x) + 2; }
int work_alias(int) __attribute__((alias("work")));
__attribute__((noinline, weak)) int weakfn(int x) { return x - 1; }
int big_buffer[4096];

int main(int argc, char **argv) {
	printf("main %p\n", (void *)main);
	printf("abort %p\n", (void *)abort);
	printf("ready\n");
	fflush(stdout);
	if (argc > 1) {
		char c;
		while (read(0, &c, 1) > 0) {
		}
	}
	big_buffer[argc] = work(argc) + weakfn(argc);
	return 0;
}
`

// compileC compiles src with gcc and extra flags into dir, returning the
// output path.
func compileC(t testing.TB, dir, name, src string, flags ...string) string {
	t.Helper()
	need(t, "gcc")
	cfile := filepath.Join(dir, name+".c")
	if err := os.WriteFile(cfile, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	args := append([]string{"-o", out}, flags...)
	args = append(args, cfile)
	run(t, "gcc", args...)
	return out
}

// systemFiles are the real binaries compared with binutils.
func systemFiles(t *testing.T) []string {
	dir := t.TempDir()
	return []string{
		libcPath,
		gdbPath,
		cc1Path,
		compileC(t, dir, "prog", testProgram, "-O1", "-g"),
		compileC(t, dir, "prog-nopie", testProgram, "-O1", "-no-pie", "-fno-pie"),
		compileC(t, dir, "prog.o", testProgram, "-O1", "-c"),
	}
}

func TestBuildIDMatchesReadelf(t *testing.T) {
	need(t, "readelf")
	re := regexp.MustCompile(`Build ID: ([0-9a-f]+)`)
	for _, path := range systemFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			needFile(t, path)
			f := mustOpen(t, path)
			want := ""
			if m := re.FindStringSubmatch(run(t, "readelf", "-n", path)); m != nil {
				want = m[1]
			}
			if got := f.BuildIDHex(); got != want {
				t.Errorf("build-id %q, readelf says %q", got, want)
			}
			if want == "" && !strings.HasSuffix(path, ".o") {
				t.Errorf("expected a build-id in %s", path)
			}
		})
	}
}

func mustOpen(t testing.TB, path string) *File {
	t.Helper()
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func hex64(t testing.TB, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	if err != nil {
		t.Fatalf("parsing %q: %v", s, err)
	}
	return v
}

func TestSegmentsMatchReadelf(t *testing.T) {
	need(t, "readelf")
	for _, path := range systemFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			needFile(t, path)
			f := mustOpen(t, path)
			var want []Segment
			sc := bufio.NewScanner(strings.NewReader(run(t, "readelf", "-lW", path)))
			for sc.Scan() {
				fields := strings.Fields(sc.Text())
				if len(fields) < 8 || fields[0] != "LOAD" {
					continue
				}
				var flags elf.ProgFlag
				for _, fl := range strings.Join(fields[6:len(fields)-1], "") {
					switch fl {
					case 'R':
						flags |= elf.PF_R
					case 'W':
						flags |= elf.PF_W
					case 'E':
						flags |= elf.PF_X
					}
				}
				want = append(want, Segment{
					Offset: hex64(t, fields[1]), Vaddr: hex64(t, fields[2]),
					Filesz: hex64(t, fields[4]), Memsz: hex64(t, fields[5]),
					Align: hex64(t, fields[len(fields)-1]), Flags: flags,
				})
			}
			if fmt.Sprint(f.Loads) != fmt.Sprint(want) {
				t.Errorf("loads\n got %+v\nwant %+v", f.Loads, want)
			}
		})
	}
}

// readelfSection is one row of readelf -SW.
type readelfSection struct {
	name                string
	addr, off, size     uint64
	flags               string
	compressed, nobits  bool
	typ                 string
	index               int
	fileBytesForCompare []byte
}

func readelfSections(t testing.TB, path string) []readelfSection {
	re := regexp.MustCompile(`^\s*\[\s*(\d+)\]\s+(\S+)\s+(\S+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+[0-9a-f]+\s+(.*)$`)
	var out []readelfSection
	for _, line := range strings.Split(run(t, "readelf", "-SW", path), "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil || m[1] == "0" {
			continue
		}
		idx, _ := strconv.Atoi(m[1])
		rest := strings.Fields(m[7])
		flags := ""
		if len(rest) == 4 {
			flags = rest[0]
		}
		out = append(out, readelfSection{
			index: idx, name: m[2], typ: m[3], addr: hex64(t, m[4]), off: hex64(t, m[5]), size: hex64(t, m[6]),
			flags: flags, compressed: strings.Contains(flags, "C"), nobits: m[3] == "NOBITS",
		})
	}
	if len(out) == 0 && !strings.Contains(run(t, "readelf", "-hW", path), "Number of section headers:          0") {
		t.Fatalf("could not parse readelf -SW %s", path)
	}
	return out
}

func TestSectionsMatchReadelf(t *testing.T) {
	need(t, "readelf")
	for _, path := range systemFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			needFile(t, path)
			f := mustOpen(t, path)
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]*Section{
				".eh_frame": f.EhFrame, ".eh_frame_hdr": f.EhFrameHdr, ".debug_frame": f.DebugFrame,
				".sframe": f.SFrame, ".got.plt": f.GotPlt, ".text": f.Text,
			}
			seen := map[string]bool{}
			for _, rs := range readelfSections(t, path) {
				s, ok := got[rs.name]
				if !ok || seen[rs.name] {
					continue
				}
				seen[rs.name] = true
				if rs.nobits {
					if s != nil {
						t.Errorf("%s: NOBITS section should be absent", rs.name)
					}
					continue
				}
				if s == nil {
					t.Errorf("%s: missing (readelf: %+v)", rs.name, rs)
					continue
				}
				if s.Addr != rs.addr || s.Offset != rs.off {
					t.Errorf("%s: addr %#x off %#x, readelf %#x %#x", rs.name, s.Addr, s.Offset, rs.addr, rs.off)
				}
				data, err := s.Load()
				if err != nil {
					t.Errorf("%s: %v", rs.name, err)
					continue
				}
				if uint64(len(data)) != s.Size {
					t.Errorf("%s: %d bytes loaded, Size %d", rs.name, len(data), s.Size)
				}
				if !rs.compressed {
					if s.Size != rs.size {
						t.Errorf("%s: size %#x, readelf %#x", rs.name, s.Size, rs.size)
					}
					if !bytes.Equal(data, raw[rs.off:rs.off+rs.size]) {
						t.Errorf("%s: contents differ from the file bytes", rs.name)
					}
				}
			}
			for name, s := range got {
				if s != nil && !seen[name] {
					t.Errorf("%s found but readelf does not list it", name)
				}
			}
			if f.Text == nil {
				t.Errorf("no .text")
			}
			if !strings.HasSuffix(path, ".o") && f.EhFrame == nil {
				t.Errorf("no .eh_frame")
			}
		})
	}
}

// nmSymbols runs nm (with -D for the dynamic table) and returns, per
// address, every name nm lists there, and the set of function-like
// addresses (types T, t, W, i) with a name each.
func nmSymbols(t testing.TB, path string, dynamic bool) (names map[uint64]map[string]bool, funcs map[uint64]string) {
	args := []string{"--defined-only", path}
	if dynamic {
		args = append([]string{"-D"}, args...)
	}
	names = map[uint64]map[string]bool{}
	funcs = map[uint64]string{}
	for _, line := range strings.Split(run(t, "nm", args...), "\n") {
		fields := strings.Fields(line)
		if len(fields) != 3 {
			continue
		}
		addr := hex64(t, fields[0])
		name, _, _ := strings.Cut(fields[2], "@")
		if names[addr] == nil {
			names[addr] = map[string]bool{}
		}
		names[addr][name] = true
		switch fields[1] {
		case "T", "t", "W", "i":
			funcs[addr] = name
		}
	}
	return names, funcs
}

func TestSymbolsMatchNm(t *testing.T) {
	need(t, "nm", "readelf")
	for _, path := range systemFiles(t) {
		if strings.HasSuffix(path, ".o") {
			continue // relocatable: every value is 0-based and they collide
		}
		t.Run(filepath.Base(path), func(t *testing.T) {
			needFile(t, path)
			f := mustOpen(t, path)
			if err := f.LoadSymbols(); err != nil {
				t.Fatal(err)
			}
			// Executable sections, to tell weak functions from weak data.
			var exec [][2]uint64
			for _, rs := range readelfSections(t, path) {
				if strings.Contains(rs.flags, "X") {
					exec = append(exec, [2]uint64{rs.addr, rs.addr + rs.size})
				}
			}
			inExec := func(a uint64) bool {
				for _, r := range exec {
					if a >= r[0] && a < r[1] {
						return true
					}
				}
				return false
			}
			checked := 0
			for _, dynamic := range []bool{true, false} {
				if !dynamic && !strings.Contains(filepath.Base(path), "prog") {
					continue // libc, gdb and cc1 are stripped: nm has no .symtab to read
				}
				names, funcs := nmSymbols(t, path, dynamic)
				for addr, nmName := range funcs {
					if !inExec(addr) {
						continue
					}
					checked++
					name, off, ok := f.Symbolize(addr)
					if !ok || off != 0 || !names[addr][name] {
						t.Errorf("Symbolize(%#x) = %q+%#x %v; nm lists %v", addr, name, off, ok, names[addr])
					}
					if len(funcs) > 500 && checked%50 != 1 {
						continue // SymbolByName is a linear scan: sample it
					}
					if a, ok := f.SymbolByName(nmName); !ok || !names[a][nmName] {
						t.Errorf("SymbolByName(%q) = %#x %v", nmName, a, ok)
					}
				}
			}
			t.Logf("%s: %d nm functions checked, %d addresses in the table", path, checked, f.NumSymbols())
			if checked == 0 {
				t.Errorf("no functions checked")
			}
		})
	}
}

// TestCompiledSymbols checks the test program's own functions by name.
func TestCompiledSymbols(t *testing.T) {
	path := compileC(t, t.TempDir(), "prog", testProgram, "-O1")
	f := mustOpen(t, path)
	work, ok := f.SymbolByName("work")
	if !ok {
		t.Fatal("no work")
	}
	if a, ok := f.SymbolByName("work_alias"); !ok || a != work {
		t.Errorf("work_alias at %#x, work at %#x", a, work)
	}
	if name, off, ok := f.Symbolize(work + 1); !ok || name != "work_alias" || off != 1 {
		t.Errorf("Symbolize(work+1) = %q+%d %v (work and its global alias work_alias tie on size, binding and underscores: perf names the address by the longer name)", name, off, ok)
	}
	for _, n := range []string{"helper", "weakfn", "main", "_start"} {
		a, ok := f.SymbolByName(n)
		if !ok {
			t.Errorf("no %s", n)
			continue
		}
		if name, off, ok := f.Symbolize(a); !ok || name != n || off != 0 {
			t.Errorf("Symbolize(%s=%#x) = %q+%d %v", n, a, name, off, ok)
		}
	}
	if _, ok := f.SymbolByName("big_buffer"); ok {
		t.Error("big_buffer is not a function")
	}
	// ReadVaddr of main matches the file bytes at main's file offset.
	main, _ := f.SymbolByName("main")
	text, err := f.Text.Load()
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 16)
	if err := f.ReadVaddr(main, got); err != nil {
		t.Fatal(err)
	}
	if want := text[main-f.Text.Addr:][:16]; !bytes.Equal(got, want) {
		t.Errorf("ReadVaddr(main) = %x, .text has %x", got, want)
	}
	// big_buffer lives in .bss: zero, from memsz beyond filesz.
	bss := mustSymbolAddr(t, path, "big_buffer")
	if err := f.ReadVaddr(bss+64, got); err != nil || !bytes.Equal(got, make([]byte, 16)) {
		t.Errorf("ReadVaddr(.bss) = %x, %v", got, err)
	}
	if err := f.ReadVaddr(1<<60, got); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("ReadVaddr(unmapped) error %v", err)
	}
}

// mustSymbolAddr asks nm for a symbol's address.
func mustSymbolAddr(t testing.TB, path, name string) uint64 {
	for _, line := range strings.Split(run(t, "nm", path), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 3 && fields[2] == name {
			return hex64(t, fields[0])
		}
	}
	t.Fatalf("nm: no %s in %s", name, path)
	return 0
}

// manyFunctions is C source with enough functions for a .debug_frame large
// enough to be worth compressing.
func manyFunctions() string {
	var b strings.Builder
	for i := 0; i < 300; i++ {
		fmt.Fprintf(&b, "__attribute__((noinline)) int f%d(int x) { volatile int a[%d]; a[0] = x; return a[0] * %d; }\n", i, i%7+1, i)
	}
	b.WriteString("int main(void) { int s = 0;\n")
	for i := 0; i < 300; i++ {
		fmt.Fprintf(&b, "s += f%d(s);\n", i)
	}
	b.WriteString("return s; }\n")
	return b.String()
}

func TestCompressedDebugFrame(t *testing.T) {
	need(t, "gcc", "objcopy", "readelf")
	dir := t.TempDir()
	src := manyFunctions()
	base := []string{"-O1", "-g", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables"}
	cases := []struct {
		name  string
		flags []string
		ctype elf.CompressionType
	}{
		{"gz-zlib", []string{"-gz=zlib"}, elf.COMPRESS_ZLIB},
		{"ld-zstd", []string{"-gz=none", "-Wl,--compress-debug-sections=zstd"}, elf.COMPRESS_ZSTD},
		{"gz-zlib-object", []string{"-gz=zlib", "-c"}, elf.COMPRESS_ZLIB},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command("gcc", append(append(append([]string{}, base...), c.flags...),
				"-o", filepath.Join(dir, c.name), "-x", "c", "-")...)
			cmd.Stdin = strings.NewReader(src)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Skipf("gcc %v cannot build this here: %v\n%s", c.flags, err, out)
			}
			path := filepath.Join(dir, c.name)
			var compressed bool
			for _, rs := range readelfSections(t, path) {
				if rs.name == ".debug_frame" {
					compressed = rs.compressed
				}
			}
			if !compressed {
				t.Skipf("toolchain left .debug_frame uncompressed with %v", c.flags)
			}
			f := mustOpen(t, path)
			if f.DebugFrame == nil {
				t.Fatal("no .debug_frame")
			}
			var ch [4]byte
			if err := readat.Full(f.r, ch[:], f.DebugFrame.Offset); err != nil || elf.CompressionType(f.ByteOrder.Uint32(ch[:])) != c.ctype {
				t.Fatalf("compression type %x, want %v (%v)", ch, c.ctype, err)
			}
			plain := filepath.Join(dir, c.name+".plain")
			run(t, "objcopy", "--decompress-debug-sections", path, plain)
			raw, err := os.ReadFile(plain)
			if err != nil {
				t.Fatal(err)
			}
			var want []byte
			for _, rs := range readelfSections(t, plain) {
				if rs.name == ".debug_frame" {
					want = raw[rs.off : rs.off+rs.size]
				}
			}
			if len(want) == 0 || !bytes.Equal(f.DebugFrame.Data, want) {
				t.Errorf(".debug_frame: %d bytes decompressed, objcopy gives %d, equal=%v",
					len(f.DebugFrame.Data), len(want), bytes.Equal(f.DebugFrame.Data, want))
			}
			t.Logf("%s: .debug_frame %d bytes from a %v section", c.name, len(want), c.ctype)
		})
	}
}

// TestBiasLive runs PIE and non-PIE builds of the test program, reads their
// /proc/PID/maps, and checks that Bias turns every mapping of the executable
// into the same bias, one that puts SymbolByName("main") at the address the
// program printed for main. For the PIE it also checks libc through the
// printed address of abort.
func TestBiasLive(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name  string
		flags []string
		pie   bool
	}{
		{"pie", []string{"-O1", "-fPIE", "-pie"}, true},
		{"nopie", []string{"-O1", "-fno-pie", "-no-pie"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			exe := compileC(t, dir, c.name, testProgram, c.flags...)
			f := mustOpen(t, exe)
			if c.pie != (f.Type == elf.ET_DYN) {
				t.Fatalf("type %v", f.Type)
			}
			cmd := exec.Command(exe, "wait")
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				stdin.Close()
				cmd.Wait()
			}()
			addrs := map[string]uint64{}
			sc := bufio.NewScanner(stdout)
			deadline := time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() })
			defer deadline.Stop()
			for sc.Scan() {
				k, v, _ := strings.Cut(sc.Text(), " ")
				if k == "ready" {
					break
				}
				addrs[k] = hex64(t, v)
			}
			maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", cmd.Process.Pid))
			if err != nil {
				t.Fatal(err)
			}
			mainAddr, ok := f.SymbolByName("main")
			if !ok {
				t.Fatal("no main")
			}
			var libc *File
			n := 0
			for _, line := range strings.Split(string(maps), "\n") {
				fields := strings.Fields(line)
				if len(fields) < 6 {
					continue
				}
				lo, hi, _ := strings.Cut(fields[0], "-")
				start, end, off := hex64(t, lo), hex64(t, hi), hex64(t, fields[2])
				switch {
				case fields[5] == exe:
					n++
					if ambiguousPage(f, off) && !(addrs["main"] >= start && addrs["main"] < end) {
						continue // see Bias: a page shared by two PT_LOADs
					}
					bias, err := f.Bias(start, off)
					if err != nil {
						t.Errorf("%s: %v", line, err)
						continue
					}
					if bias+mainAddr != addrs["main"] {
						t.Errorf("%s: bias %#x puts main at %#x, program says %#x", line, bias, bias+mainAddr, addrs["main"])
					}
					if !c.pie && bias != 0 {
						t.Errorf("non-PIE bias %#x", bias)
					}
				case c.pie && strings.Contains(fields[5], "libc.so") && addrs["abort"] >= start && addrs["abort"] < end:
					libc = mustOpen(t, fields[5])
					bias, err := libc.Bias(start, off)
					if err != nil {
						t.Fatal(err)
					}
					name, o, ok := libc.Symbolize(addrs["abort"] - bias)
					if name != "abort" || o != 0 || !ok {
						t.Errorf("libc: abort at %#x, bias %#x: Symbolize gives %q+%d %v", addrs["abort"], bias, name, o, ok)
					}
				}
			}
			if n < 2 {
				t.Errorf("found %d mappings of %s in\n%s", n, exe, maps)
			}
			if c.pie && libc == nil {
				t.Errorf("no libc mapping contains abort %#x", addrs["abort"])
			}
			if _, err := f.Bias(0x1000, 1<<40); err == nil || !strings.Contains(err.Error(), exe) {
				t.Errorf("Bias for an offset no PT_LOAD covers: %v", err)
			}
		})
	}
}

// ambiguousPage reports whether two PT_LOADs start in the file page at off.
func ambiguousPage(f *File, off uint64) bool {
	n := 0
	for _, s := range f.Loads {
		if s.Offset&^0xfff == off {
			n++
		}
	}
	return n > 1
}

// BenchmarkOpenSymbols measures Open plus building the symbol table.
// Run with: go test -run '^$' -bench OpenSymbols ./elfobj
func BenchmarkOpenSymbols(b *testing.B) {
	for _, path := range []string{libcPath, gdbPath, cc1Path} {
		b.Run(filepath.Base(path), func(b *testing.B) {
			needFile(b, path)
			b.Run("Open", func(b *testing.B) {
				for b.Loop() {
					f, err := Open(path)
					if err != nil {
						b.Fatal(err)
					}
					f.Close()
				}
			})
			b.Run("OpenAndSymbols", func(b *testing.B) {
				for b.Loop() {
					f, err := Open(path)
					if err != nil {
						b.Fatal(err)
					}
					if err := f.LoadSymbols(); err != nil {
						b.Fatal(err)
					}
					f.Close()
				}
			})
			f, err := Open(path)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			f.LoadSymbols()
			addrs := make([]uint64, 0, 1024)
			for _, s := range f.Loads {
				if s.Flags&elf.PF_X != 0 {
					for i := uint64(0); i < 1024; i++ {
						addrs = append(addrs, s.Vaddr+s.Memsz/1024*i)
					}
				}
			}
			b.Run("Symbolize", func(b *testing.B) {
				i := 0
				for b.Loop() {
					f.Symbolize(addrs[i%len(addrs)])
					i++
				}
			})
		})
	}
}

// TestFunctionExtentsMatchNm: FunctionExtents, which scans the symbol
// tables for a few names without building the table, gives each sized
// function the lowest address and the size nm -S prints for it, on
// libc, libc's separate debug file when installed, and a compiled PIE.
func TestFunctionExtentsMatchNm(t *testing.T) {
	need(t, "nm", "readelf")
	paths := []string{libcPath}
	if dbg := run(t, "sh", "-c", "f=/usr/lib/debug/.build-id/$(readelf -n "+libcPath+" | awk '/Build ID/{print substr($3,1,2) \"/\" substr($3,3)}').debug; [ -f $f ] && echo $f || true"); strings.TrimSpace(dbg) != "" {
		paths = append(paths, strings.TrimSpace(dbg))
	} else {
		t.Log("libc6-dbg not installed: libc's debug file not checked")
	}
	paths = append(paths, compileC(t, t.TempDir(), "prog", testProgram, "-O1", "-g"))
	for _, path := range paths {
		needFile(t, path)
		dynamic := path == libcPath // stripped: only .dynsym
		args := []string{"-S", "--defined-only", path}
		if dynamic {
			args = append([]string{"-D"}, args...)
		}
		type sym struct{ addr, size uint64 }
		want := map[string]sym{}
		for _, line := range strings.Split(run(t, "nm", args...), "\n") {
			fields := strings.Fields(line)
			if len(fields) != 4 || !strings.ContainsAny(fields[2], "TtWi") {
				continue
			}
			name, _, _ := strings.Cut(fields[3], "@")
			s := sym{hex64(t, fields[0]), hex64(t, fields[1])}
			if old, ok := want[name]; (!ok || s.addr < old.addr) && s.size > 0 {
				want[name] = s
			}
		}
		var names []string
		for name := range want {
			names = append(names, name)
		}
		sort.Strings(names)
		if len(names) > 400 {
			step := len(names) / 400
			var some []string
			for i := 0; i < len(names); i += step {
				some = append(some, names[i])
			}
			names = some
		}
		f := mustOpen(t, path)
		got, err := f.FunctionExtents(names)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, name := range names {
			w := want[name]
			if e, ok := got[name]; !ok || e.Start != w.addr || e.End != w.addr+w.size {
				t.Errorf("%s: FunctionExtents(%q) = %#x-%#x %v; nm -S: %#x size %#x", path, name, e.Start, e.End, ok, w.addr, w.size)
			}
		}
		if _, ok := got["no such function"]; ok {
			t.Errorf("%s: a name that is not there was found", path)
		}
		t.Logf("%s: %d functions checked", path, len(names))
	}
}

// TestFunctionExtentsUnsized: an assembly function without a size ends at
// the next function, as Symbolize attributes addresses, and its alias
// (a second name at the same address) gets the same extent.
func TestFunctionExtentsUnsized(t *testing.T) {
	src := `
__asm__(".text\n.globl nosize\n.globl nosize_alias\n.type nosize,@function\n.type nosize_alias,@function\n"
	"nosize:\nnosize_alias:\n nop\n nop\n ret\n"
	".globl after\n.type after,@function\nafter:\n ret\n.size after, 1\n");
int main(void) { return 0; }
`
	f := mustOpen(t, compileC(t, t.TempDir(), "unsized", src, "-O1"))
	after, _, ok := f.SymbolExtent("after")
	if !ok {
		t.Fatal("no symbol after")
	}
	got, err := f.FunctionExtents([]string{"nosize", "nosize_alias", "main"})
	if err != nil {
		t.Fatal(err)
	}
	lo, _, _ := f.SymbolExtent("nosize")
	if e := got["nosize"]; e.Start != lo || e.End != after {
		t.Errorf("nosize: FunctionExtents %#x-%#x, want %#x-%#x (up to the next function)", e.Start, e.End, lo, after)
	}
	if got["nosize_alias"] != got["nosize"] {
		t.Errorf("alias %v, function %v", got["nosize_alias"], got["nosize"])
	}
	if m, ok := got["main"]; !ok || m.End <= m.Start {
		t.Errorf("main: %v %v", m, ok)
	}
}
