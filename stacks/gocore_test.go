package stacks_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/output"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// TestStrippedGoCore (issue 26 item 2, cores): cores of goabort built
// with -ldflags='-s -w', whose threads sleep in frameless leaves
// (runtime.futex, Syscall6): on amd64 the kernel's core, on arm64 (where
// the leaves keep their return address in the link register) the core
// qemu-user writes of the guest. Every thread unwound with the pcln table
// must match the same core unwound with the DWARF CFI of the unstripped
// build (the same code layout) up to the runtime's top frame, and on amd64
// gdb's walk of the core with the unstripped build; the goroutines blocked
// in read must end with the frames and offsets the Go runtime's own
// traceback printed for them just before the core was written.
func TestStrippedGoCore(t *testing.T) {
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run(arch, func(t *testing.T) {
			var qemu string
			if arch != runtime.GOARCH {
				var err error
				if qemu, err = exec.LookPath("qemu-" + map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[arch]); err != nil {
					t.Skipf("no %s here: needs qemu-user", arch)
				}
			}
			testStrippedGoCore(t, arch, qemu)
		})
	}
}

func testStrippedGoCore(t *testing.T, arch, qemu string) {
	dir := t.TempDir()
	full, stripped := filepath.Join(dir, "goabort-full"), filepath.Join(dir, "goabort")
	for _, b := range []struct {
		exe   string
		flags []string
	}{{full, nil}, {stripped, []string{"-ldflags=-s -w"}}} {
		args := append(append([]string{"build", "-o", b.exe}, b.flags...), "./testdata/goabort")
		cmd := exec.Command("go", args...)
		cmd.Env = append(os.Environ(), "GOFLAGS=", "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, out)
		}
	}
	requireSameLayout(t, full, stripped)
	core, dump := goAbortCore(t, qemu, dir)

	sym := &symbolize.Symbolizer{Inlines: true}
	tg := openCore(t, core, stripped, &target.Objects{})
	if tg.Arch.String() != arch || len(tg.Contexts) < 4 {
		t.Fatalf("arch %v, %d threads", tg.Arch, len(tg.Contexts))
	}
	got := stacks.Unwind(tg, stacks.Options{Unwinder: unwind.NewAuto()}, sym)
	ref := stacks.Unwind(openCore(t, core, full, &target.Objects{}), stacks.Options{Unwinder: unwind.NewDWARF()}, &symbolize.Symbolizer{Inlines: true})
	leaves := 0
	for _, want := range ref.Threads {
		g := findThread(got, want.TID)
		if g == nil {
			t.Errorf("thread %d missing", want.TID)
			continue
		}
		n := topFrame(g)
		ok := n > 0 && n <= len(want.Frames)
		if n == 0 && topFrame(&want) == 0 {
			// A thread the core caught mid-clone (runtime.clone's
			// child before mstart) has no Go top frame in either
			// walk: the whole walks must agree.
			n = len(want.Frames)
			ok = len(g.Frames) == n
		}
		for i := 0; ok && i < n; i++ {
			ok = g.Frames[i].PC == want.Frames[i].PC && g.Frames[i].Function == want.Frames[i].Function
		}
		if !ok {
			t.Errorf("thread %d (end %s %s) differs from the unstripped build's DWARF walk:\n%s", want.TID, g.End, g.EndDetail, sideBySideThreads(g, &want))
			continue
		}
		switch g.Frames[0].Function {
		case "runtime.futex", "internal/runtime/syscall/linux.Syscall6":
			leaves++
			if m := g.Frames[1].Method; m != unwind.MethodGoPCLN.String() {
				t.Errorf("thread %d: %s's caller %s found by %s, want %s", want.TID, g.Frames[0].Function, g.Frames[1].Function, m, unwind.MethodGoPCLN)
			}
		}
	}
	if leaves == 0 {
		t.Error("no thread sleeps in runtime.futex or Syscall6")
	}
	if qemu == "" {
		// gdb reads the core with the unstripped build's symbols and
		// DWARF: the same physical frames and names, down to where the
		// runtime's traceback ends a stack.
		gdb, err := fixture.GdbCore(t, core, full)
		if err != nil {
			t.Fatalf("gdb: %v", err)
		}
		for _, st := range gdb {
			want := st.Physical()
			g := findThread(got, st.TID)
			n := 0
			if g != nil {
				g = physical(g)
				n = topFrame(g)
			}
			ok := n > 0 && n <= len(want.Frames)
			for i := 0; ok && i < n; i++ {
				ok = g.Frames[i].PC == want.Frames[i].PC && g.Frames[i].Function == want.Frames[i].Func
			}
			if !ok {
				t.Errorf("thread %d differs from gdb's first frames (unstripped build):\n%s", st.TID, sideBySide(g, want))
			}
		}
	}
	blocked := 0
	for _, gr := range dump {
		if !strings.Contains(gr.state, "syscall") {
			continue
		}
		blocked++
		var th *output.Thread
		for i := range got.Threads {
			for _, f := range got.Threads[i].Frames {
				if f.Function == gr.frames[0].fn {
					th = &got.Threads[i]
				}
			}
			if th != nil && endsWithGo(th, gr.frames) {
				break
			}
			th = nil
		}
		if th == nil {
			t.Errorf("goroutine %d: no thread ends with the runtime's frames %v", gr.id, gr.frames)
		}
	}
	if blocked != 2 {
		t.Errorf("%d goroutines in system calls in the runtime's dump, want 2", blocked)
	}
}

// goAbortCore runs dir/goabort (under qemu when qemu is not "") until it
// is ready and every thread sleeps, then makes it die, and returns the
// core written of it (by the kernel, or by qemu of its guest) and the
// runtime's dump of its goroutines.
func goAbortCore(t *testing.T, qemu, dir string) (string, []goGoroutine) {
	t.Helper()
	script := "ulimit -c unlimited 2>/dev/null || exit 97; exec ./goabort"
	if qemu != "" {
		// A directory named core keeps the kernel from writing qemu's
		// own core (core_pattern "core"); the limit (in sh's 512-byte
		// blocks) bounds it elsewhere.
		if err := os.Mkdir(filepath.Join(dir, "core"), 0o755); err != nil {
			t.Fatal(err)
		}
		script = "ulimit -c 400000; exec " + qemu + " ./goabort"
	}
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = dir
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := false
	defer func() {
		if !done {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("first line %q", line)
		}
		ready <- err
		io.Copy(io.Discard, stdout)
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("goabort: %v\n%s", err, stderr.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("goabort not ready after 2 minutes\n%s", stderr.String())
	}
	// Once every thread sleeps (under qemu, every guest thread is a host
	// thread of qemu), they are in their system calls.
	(&fixture.Proc{PID: cmd.Process.Pid}).WaitBlocked(t)
	begin := time.Now()
	if _, err := io.WriteString(stdin, "x\n"); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	done = true
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Exited() && ws.ExitStatus() == 97 {
		t.Skip("cannot raise the core size limit (ulimit -c unlimited failed)")
	}
	if !ws.Signaled() || ws.Signal() != syscall.SIGABRT {
		t.Fatalf("goabort did not die of SIGABRT: %v\n%s", err, stderr.String())
	}
	var core string
	if qemu != "" {
		cores, _ := filepath.Glob(filepath.Join(dir, "qemu_goabort_*.core"))
		if len(cores) != 1 {
			t.Fatalf("qemu wrote no guest core in %s\n%s", dir, stderr.String())
		}
		core = cores[0]
	} else {
		if !ws.CoreDump() {
			t.Fatalf("goabort died of SIGABRT without a core\n%s", stderr.String())
		}
		core = fixture.FindKernelCore(t, dir, cmd.Process.Pid, begin)
	}
	text, err := os.ReadFile(filepath.Join(dir, "stacks.txt"))
	if err != nil {
		t.Fatal(err)
	}
	return core, parseGoDump(string(text))
}

// goGoroutine is one goroutine of the runtime's traceback.
type goGoroutine struct {
	id     int
	state  string
	frames []goFrame
}

// goFrame is one frame of it; offset is -1 when the runtime printed none
// (an inlined call).
type goFrame struct {
	fn     string
	offset int64
}

var (
	goHeaderRE = regexp.MustCompile(`^goroutine (\d+) \[(.*)\]:$`)
	goFuncRE   = regexp.MustCompile(`^(\S+)\((?:.*)\)$`)
	goPosRE    = regexp.MustCompile(`^\t\S+:\d+(?: \+0x([0-9a-f]+))?$`)
)

// parseGoDump parses runtime.Stack's text (all goroutines).
func parseGoDump(text string) []goGoroutine {
	var out []goGoroutine
	var fn string
	for _, line := range strings.Split(text, "\n") {
		if m := goHeaderRE.FindStringSubmatch(line); m != nil {
			id, _ := strconv.Atoi(m[1])
			out = append(out, goGoroutine{id: id, state: m[2]})
			fn = ""
			continue
		}
		if len(out) == 0 {
			continue
		}
		if strings.HasPrefix(line, "created by ") {
			fn = "-" // the creator's position follows: not a frame
			continue
		}
		if m := goFuncRE.FindStringSubmatch(line); m != nil {
			fn = m[1]
			continue
		}
		if m := goPosRE.FindStringSubmatch(line); m != nil && fn != "" && fn != "-" {
			off := int64(-1)
			if m[1] != "" {
				off, _ = strconv.ParseInt(m[1], 16, 64)
			}
			g := &out[len(out)-1]
			g.frames = append(g.frames, goFrame{fn, off})
			fn = ""
		}
	}
	return out
}

// endsWithGo reports whether th's frames, without its runtime.goexit,
// end with the runtime's frames: the same functions, inlined calls
// included, at the same offsets but for the first (where the runtime
// shows a goroutine in a system call as it entered it).
func endsWithGo(th *output.Thread, frames []goFrame) bool {
	fs := th.Frames
	if n := len(fs); n > 0 && fs[n-1].Function == "runtime.goexit" {
		fs = fs[:n-1]
	}
	if len(fs) < len(frames) {
		return false
	}
	fs = fs[len(fs)-len(frames):]
	for i, w := range frames {
		if fs[i].Function != w.fn || i > 0 && w.offset >= 0 && (fs[i].Inlined || int64(fs[i].Offset) != w.offset) {
			return false
		}
	}
	return true
}

// physical returns th without its inlined frames, as gdb's
// Stack.Physical.
func physical(th *output.Thread) *output.Thread {
	p := *th
	p.Frames = nil
	for _, f := range th.Frames {
		if !f.Inlined {
			p.Frames = append(p.Frames, f)
		}
	}
	return &p
}

// topFrame returns the number of th's frames down to the first of the
// runtime's top frames (where its traceback ends a stack), or 0.
func topFrame(th *output.Thread) int {
	for i, f := range th.Frames {
		if goTopFrames[f.Function] {
			return i + 1
		}
	}
	return 0
}

// sideBySideThreads prints two walks of a thread next to each other.
func sideBySideThreads(a, b *output.Thread) string {
	var s strings.Builder
	for i := 0; i < max(len(a.Frames), len(b.Frames)); i++ {
		var l, r string
		if i < len(a.Frames) {
			f := a.Frames[i]
			l = fmt.Sprintf("%#x %s+%#x [%s]", f.PC, f.Function, f.Offset, f.Method)
		}
		if i < len(b.Frames) {
			f := b.Frames[i]
			r = fmt.Sprintf("%#x %s+%#x [%s]", f.PC, f.Function, f.Offset, f.Method)
		}
		fmt.Fprintf(&s, "  #%-2d %-60s %s\n", i, l, r)
	}
	return s.String()
}
