package symbolize

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"github.com/rewindstack/rewind/target"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// needTool skips the test when a reference tool is missing.
func needTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed: %v", name, err)
	}
	return p
}

// run runs a command and returns its standard output, failing the test on
// error.
func run(t testing.TB, stdin string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// pieBase is where tests load position-independent objects, so that a
// wrong load bias cannot go unnoticed.
const pieBase = 0x7f1234560000

// loadSpace maps every PT_LOAD of the object at path as the dynamic loader
// would (at pieBase for ET_DYN, at its addresses for ET_EXEC) and returns
// the address space and the load bias.
func loadSpace(t testing.TB, path string) (*target.AddressSpace, uint64) {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	bias := uint64(0)
	if ef.Type == elf.ET_DYN {
		bias = pieBase
	}
	var maps []target.Mapping
	var text []uint64
	for _, p := range ef.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		start := (p.Vaddr + bias) &^ 0xfff
		end := (p.Vaddr + bias + p.Memsz + 0xfff) &^ 0xfff
		maps = append(maps, target.Mapping{Start: start, End: end, Offset: p.Off &^ 0xfff, Path: path})
		if p.Flags&elf.PF_X != 0 {
			text = append(text, start)
		}
	}
	space := target.NewAddressSpace(maps, &target.Objects{})
	// Code mappings must have the bias; a data mapping that shares a file
	// page with the segment before it may not (see elfobj.File.Bias).
	for _, a := range text {
		m := space.Find(a)
		if m == nil || m.Module == nil || m.Module.File == nil {
			t.Fatalf("%s: code mapping %#x not opened", path, a)
		}
		if m.Bias != bias {
			t.Fatalf("%s: code bias %#x, want %#x", path, m.Bias, bias)
		}
	}
	return space, bias
}

// insn is one instruction listed by objdump.
type insn struct {
	addr, next uint64
	fn         string
	call       bool
}

// disassemble lists the instructions of the named functions (all when
// funcs is empty) with objdump -d.
func disassemble(t testing.TB, path string, funcs ...string) []insn {
	t.Helper()
	out := run(t, "", "objdump", "-d", "--no-show-raw-insn", "-w", path)
	// Alignment padding after a function is outside its symbol; the
	// tools disagree about it (addr2line names the function before it),
	// so only addresses inside a sized function symbol are listed.
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	syms, _ := ef.Symbols()
	dyn, _ := ef.DynamicSymbols()
	ef.Close()
	sized := map[string][2]uint64{}
	for _, s := range append(syms, dyn...) {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Size > 0 {
			sized[s.Name] = [2]uint64{s.Value, s.Value + s.Size}
		}
	}
	inside := func(fn string, a uint64) bool {
		if at := strings.IndexByte(fn, '@'); at > 0 {
			fn = fn[:at] // objdump prints dynamic symbols' versions
		}
		r, ok := sized[fn]
		return ok && a >= r[0] && a < r[1]
	}
	want := map[string]bool{}
	for _, f := range funcs {
		want[f] = true
	}
	var list []insn
	fn := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasSuffix(line, ">:") {
			if i := strings.IndexByte(line, '<'); i > 0 {
				fn = line[i+1 : len(line)-2]
			}
			continue
		}
		colon := strings.IndexByte(line, ':')
		if colon < 0 || !strings.HasPrefix(line, " ") {
			continue
		}
		addr, err := strconv.ParseUint(strings.TrimSpace(line[:colon]), 16, 64)
		if err != nil {
			continue
		}
		if n := len(list); n > 0 && list[n-1].next == 0 && list[n-1].fn == fn {
			list[n-1].next = addr
		}
		if len(want) > 0 && !want[fn] || !inside(fn, addr) {
			continue
		}
		fields := strings.Fields(line[colon+1:])
		list = append(list, insn{addr: addr, fn: fn, call: len(fields) > 0 && strings.HasPrefix(fields[0], "call")})
	}
	return list
}

// refFrame is one frame as addr2line prints it.
type refFrame struct {
	fn, file string
	line     int
}

func (f refFrame) String() string {
	return fmt.Sprintf("%s %s:%d", f.fn, filepath.Base(f.file), f.line)
}

// addr2line runs tool (addr2line or eu-addr2line) with args on the file
// addresses and returns each address's frames, innermost first. Both
// print, per address (-a), the address and then a function line and a
// "file:line" line per frame.
func addr2line(t testing.TB, tool string, args []string, addrs []uint64) map[uint64][]refFrame {
	t.Helper()
	var in strings.Builder
	for _, a := range addrs {
		fmt.Fprintf(&in, "%#x\n", a)
	}
	res := map[uint64][]refFrame{}
	if len(addrs) == 0 {
		return res
	}
	out := run(t, in.String(), tool, args...)
	var cur uint64
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "0x") {
			a, err := strconv.ParseUint(l[2:], 16, 64)
			if err != nil {
				t.Fatalf("%s: bad address line %q", tool, l)
			}
			cur = a
			res[cur] = nil
			continue
		}
		if i+1 >= len(lines) {
			t.Fatalf("%s: function line %q without position", tool, l)
		}
		pos := lines[i+1]
		i++
		if j := strings.Index(pos, " (discriminator"); j >= 0 {
			pos = pos[:j]
		}
		if j := strings.Index(l, " inlined at "); j >= 0 {
			l = l[:j] // eu-addr2line names the call site on the function line too
		}
		f := refFrame{fn: l}
		if f.fn == "??" {
			f.fn = ""
		}
		// "file:line", or eu-addr2line's "file:line:column".
		parts := strings.Split(pos, ":")
		if n := len(parts); n >= 3 {
			if _, err := strconv.Atoi(parts[n-1]); err == nil {
				if _, err := strconv.Atoi(parts[n-2]); err == nil {
					parts = parts[:n-1]
				}
			}
		}
		if n := len(parts); n >= 2 {
			f.file = strings.Join(parts[:n-1], ":")
			f.line, _ = strconv.Atoi(parts[n-1])
		}
		if f.file == "??" {
			f.file = ""
		}
		res[cur] = append(res[cur], f)
	}
	return res
}

// sameFrames compares our entries with a reference's: names, file base
// names and lines, level by level.
func sameFrames(got []Location, want []refFrame, checkNames func(i int) bool) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range want {
		g, w := got[i], want[i]
		if (checkNames == nil || checkNames(i)) && g.Function != w.fn {
			return false
		}
		if filepath.Base(g.File) != filepath.Base(w.file) && !(g.File == "" && w.file == "") || g.Line != w.line {
			return false
		}
	}
	return true
}

func formatLocs(locs []Location) string {
	var b strings.Builder
	for _, l := range locs {
		inl := ""
		if l.Inlined {
			inl = " (inlined)"
		}
		fmt.Fprintf(&b, "\n      %s+%#x %s:%d%s", l.Function, l.Offset, filepath.Base(l.File), l.Line, inl)
	}
	return b.String()
}

func formatRefs(refs []refFrame) string {
	var b strings.Builder
	for _, r := range refs {
		fmt.Fprintf(&b, "\n      %s", r)
	}
	return b.String()
}

// testFrame is a frame as a walk reports it: a PC that is exact (frame 0)
// or a return address.
type testFrame struct {
	PC    uint64
	Exact bool
}

// LookupPC is the address the frame's code is looked up at.
func (f testFrame) LookupPC() uint64 {
	if f.Exact || f.PC == 0 {
		return f.PC
	}
	return f.PC - 1
}

// testFrameAt symbolizes f as a walk would hand it over: in the mapping
// that holds its lookup address.
func testFrameAt(s *Symbolizer, space *target.AddressSpace, f testFrame) []Location {
	return s.Frame(space.Find(f.LookupPC()), f.PC, f.Exact)
}
