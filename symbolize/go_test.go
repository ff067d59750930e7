package symbolize

import (
	"debug/elf"
	"github.com/rewindstack/rewind/internal/goruntime"
	"github.com/rewindstack/rewind/target"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// buildGo builds testdata/gostack with extra go build flags.
func buildGo(t testing.TB, flags ...string) string {
	t.Helper()
	goTool := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if !fileExists(goTool) {
		goTool = needTool(t, "go")
	}
	exe := filepath.Join(t.TempDir(), "gostack")
	cmd := exec.Command(goTool, append(append([]string{"build", "-o", exe}, flags...), ".")...)
	cmd.Dir = filepath.Join("testdata", "gostack")
	cmd.Env = append(os.Environ(), "GOFLAGS=", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", flags, err, out)
	}
	return exe
}

// runtimeFrame is one line of gostack's output.
type runtimeFrame struct {
	pc   uint64
	fn   string
	file string
	line int
}

// TestGoMatchesRuntime runs the Go program, which prints runtime.Callers
// PCs with runtime.CallersFrames' view of each, and checks that expanding
// each physical PC gives the runtime's frames, inlined ones included:
// runtime.Callers lists one PC per inlined call after the physical
// frame's return address, so our expansion of a return address must
// match that many consecutive runtime frames (function, file, line). It
// does so for a default build (inlining) and one with -gcflags=all=-l.
// It then compares every instruction of the main package, and every
// stack PC, with go tool addr2line (physical function and innermost
// file:line).
func TestGoMatchesRuntime(t *testing.T) {
	for _, v := range []struct {
		name    string
		flags   []string
		inlines bool
	}{
		{"default", nil, true},
		{"noinline", []string{"-gcflags=all=-l"}, false},
		{"pie", []string{"-buildmode=pie"}, true},
		{"stripped", []string{"-ldflags=-s -w"}, true},
		{"pie-stripped", []string{"-buildmode=pie", "-ldflags=-s -w"}, true},
	} {
		t.Run(v.name, func(t *testing.T) {
			exe := buildGo(t, v.flags...)
			out := run(t, "", exe)
			var ref []runtimeFrame
			lines := strings.Split(strings.TrimSpace(out), "\n")
			base, ok := strings.CutPrefix(lines[0], "base\t")
			runBase, err := strconv.ParseUint(base, 0, 64)
			if !ok || err != nil {
				t.Fatalf("bad first line %q", lines[0])
			}
			for _, l := range lines[1:] {
				f := strings.Split(l, "\t")
				if len(f) != 4 {
					t.Fatalf("bad line %q", l)
				}
				pc, err1 := strconv.ParseUint(f[0], 0, 64)
				line, err2 := strconv.Atoi(f[3])
				if err1 != nil || err2 != nil {
					t.Fatalf("bad line %q", l)
				}
				ref = append(ref, runtimeFrame{pc, f[1], f[2], line})
			}
			space, bias := loadSpace(t, exe)
			// The program ran at another base: move its PCs to ours.
			ref = rebase(t, exe, ref, runBase, bias)
			sym := &Symbolizer{Inlines: true, Cache: NewCache()}
			physical, maxDepth := 0, 0
			for i := 0; i < len(ref); {
				fr := testFrame{PC: ref[i].pc}
				got := testFrameAt(sym, space, fr)
				ok := i+len(got) <= len(ref)
				for j := 0; ok && j < len(got); j++ {
					r := ref[i+j]
					ok = got[j].Function == r.fn && got[j].File == r.file && got[j].Line == r.line && got[j].Inlined == (j < len(got)-1)
				}
				if !ok {
					var want []refFrame
					for j := i; j < len(ref) && j < i+len(got)+2; j++ {
						want = append(want, refFrame{ref[j].fn, ref[j].file, ref[j].line})
					}
					t.Fatalf("pc %#x:\n    rewind:%s\n    runtime (from here):%s", ref[i].pc, formatLocs(got), formatRefs(want))
				}
				if phys := got[len(got)-1]; phys.Offset == 0 || phys.Module != exe {
					t.Errorf("pc %#x: physical entry %+v", ref[i].pc, phys)
				}
				maxDepth = max(maxDepth, len(got))
				physical++
				i += len(got)
			}
			t.Logf("%d runtime frames matched by expanding %d physical PCs (deepest %d)", len(ref), physical, maxDepth)
			if v.inlines && maxDepth < 4 {
				t.Errorf("deepest expansion %d: the inlined chain leaf<-inner<-outer<-through<-mid was not expanded", maxDepth)
			}
			if !v.inlines && maxDepth != 1 {
				t.Errorf("built without inlining, yet an expansion has %d entries", maxDepth)
			}
			if v.name == "default" || v.name == "noinline" {
				compareGoAddr2line(t, exe, space, sym, ref)
			}
		})
	}
}

// rebase moves the PCs the program printed (at its own load address,
// runBase being where its file offset 0 was mapped) to where loadSpace
// mapped it.
func rebase(t *testing.T, exe string, ref []runtimeFrame, runBase, bias uint64) []runtimeFrame {
	ef, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	first := uint64(0)
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			first = p.Vaddr &^ 0xfff
			break
		}
	}
	out := append([]runtimeFrame(nil), ref...)
	for i := range out {
		out[i].pc = out[i].pc - (runBase - first) + bias
	}
	return out
}

// compareGoAddr2line checks the main package's instructions (from go tool
// objdump) and the stack's PCs against go tool addr2line, which prints
// the physical function and the file:line of the address itself (the
// innermost inlined position) and no inlined frames.
func compareGoAddr2line(t *testing.T, exe string, space *target.AddressSpace, sym *Symbolizer, ref []runtimeFrame) {
	t.Helper()
	dump := run(t, "", "go", "tool", "objdump", "-s", `^main\.`, exe)
	var addrs []uint64
	for _, l := range strings.Split(dump, "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && strings.HasPrefix(f[1], "0x") && !strings.HasPrefix(l, "TEXT") {
			if a, err := strconv.ParseUint(f[1], 0, 64); err == nil {
				addrs = append(addrs, a)
			}
		}
	}
	for _, r := range ref {
		addrs = append(addrs, r.pc-1)
	}
	if len(addrs) < 50 {
		t.Fatalf("go tool objdump listed only %d instructions", len(addrs))
	}
	var in strings.Builder
	for _, a := range addrs {
		in.WriteString(strconv.FormatUint(a, 16) + "\n")
	}
	lines := strings.Split(strings.TrimSpace(run(t, in.String(), "go", "tool", "addr2line", exe)), "\n")
	if len(lines) != 2*len(addrs) {
		t.Fatalf("go tool addr2line printed %d lines for %d addresses", len(lines), len(addrs))
	}
	bad := 0
	for i, a := range addrs {
		fn, pos := goruntime.PrintName(lines[2*i]), lines[2*i+1]
		got := testFrameAt(sym, space, testFrame{PC: a, Exact: true})
		phys, innermost := got[len(got)-1], got[0]
		if have := innermost.File + ":" + strconv.Itoa(innermost.Line); phys.Function != fn || have != pos {
			bad++
			if bad <= 10 {
				t.Errorf("%#x: rewind %s at %s, go tool addr2line %s at %s", a, phys.Function, have, fn, pos)
			}
		}
	}
	t.Logf("%d addresses compared with go tool addr2line, %d differ", len(addrs), bad)
}
