package clitest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
)

// startRuby runs runtimes/ruby/testdata/park.rb under Debian's ruby, its
// stdin a pipe nobody writes, and returns it with what each thread's
// caller_locations said (by native thread id, "label (path:line)" a
// frame, innermost first).
func startRuby(t *testing.T) (*fixture.Proc, map[string][]string) {
	const exe = "/usr/bin/ruby"
	if _, err := os.Stat(exe); err != nil {
		t.Skipf("no %s: %v", exe, err)
	}
	script, err := filepath.Abs("../../../runtimes/ruby/testdata/park.rb")
	if err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(t.TempDir(), "report")
	return startRubyCmd(t, exec.Command(exe, script, report), report)
}

// startRubyCmd starts cmd (park.rb writing its report to report, as
// this process sees it), its stdin a pipe nobody writes.
func startRubyCmd(t *testing.T, cmd *exec.Cmd, report string) (*fixture.Proc, map[string][]string) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	cmd.Stdin = r
	p := fixture.StartCmd(t, cmd)
	r.Close()
	b, err := os.ReadFile(report)
	if err != nil || !strings.HasSuffix(string(b), "\nEND\n") {
		t.Fatalf("report: %v\n%s", err, b)
	}
	want := map[string][]string{}
	tid := ""
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\nEND\n"), "\n") {
		if s, ok := strings.CutPrefix(line, "THREAD "); ok {
			tid = s
			continue
		}
		f := strings.Split(line, "\t")
		want[tid] = append(want[tid], fmt.Sprintf("%s (%s:%s)", f[0], f[1], f[2]))
	}
	return p, want
}

// rubyUnchecked is the note of Ruby stacks not re-read in the pause.
const rubyUnchecked = "the Ruby stacks were read just before the pause and not re-read in it: that would have held the threads stopped past the pause's bound (--max-pause)"

// TestDumpRuby: rewind dump of a Ruby 3.1 process, live and from its
// gcore core, prints in each thread the Ruby frames its caller_locations
// gave, as "label (path:line) [ruby]", below the C method it parks in
// (gets or pop, with its caller's place), each run of Ruby frames just
// above an rb_vm_exec frame; --json has them with null pc, module and
// offset and method "ruby"; --no-ruby leaves them out.
func TestDumpRuby(t *testing.T) {
	p, want := startRuby(t)
	core := fixture.Gcore(t, p)
	for _, args := range [][]string{{"dump", strconv.Itoa(p.PID)}, {"dump", "--core", core}} {
		checkRubyDump(t, args, want, " rb_vm_exec+")
	}
	checkRubyJSON(t, p.PID, want)
	out, _, _ := run(t, "dump", "--no-ruby", strconv.Itoa(p.PID))
	if strings.Contains(out, "[ruby]") || !strings.Contains(out, "rb_vm_exec") {
		t.Errorf("--no-ruby printed Ruby frames, or no native ones")
	}
}

// checkRubyDump runs rewind with args and checks that every thread's
// Ruby frames are what its caller_locations said (want), below the C
// method it parks in (gets or pop, with its caller's place), each run
// of them just above a native frame holding entry ("" for any native
// frame: an entry without a symbol).
func checkRubyDump(t *testing.T, args []string, want map[string][]string, entry string) {
	t.Helper()
	out, errOut, code := run(t, args...)
	// On a loaded machine stopping the threads can take past
	// --max-pause: the Ruby stacks read just before the pause are
	// kept, with that note, and are still those compared.
	errOut = strings.ReplaceAll(errOut, "rewind: warning: Ruby stacks: "+rubyUnchecked+"\n", "")
	if code != 0 || strings.Contains(errOut, "Ruby") {
		t.Fatalf("%v: exit %d: %s", args, code, errOut)
	}
	threads := map[string][]string{} // tid → its Ruby frames
	for _, sec := range strings.Split(out, "\nTID ")[1:] {
		tid, _, _ := strings.Cut(sec, ":")
		lines := strings.Split(sec, "\n")
		for i, line := range lines {
			f, ok := strings.CutSuffix(line, " [ruby]")
			if !ok {
				continue
			}
			_, f, _ = strings.Cut(strings.TrimSpace(f), " ")
			threads[tid] = append(threads[tid], strings.TrimSpace(f))
			next := lines[min(i+1, len(lines)-1)]
			if !strings.HasSuffix(next, "[ruby]") && (!strings.Contains(next, entry) || !strings.Contains(next, " 0x")) {
				t.Errorf("%v: thread %s: Ruby frame %q is followed by %q", args, tid, f, next)
			}
		}
	}
	for tid, w := range want {
		got := threads[tid]
		place := w[0][strings.LastIndex(w[0], " ("):] // the C method shows its caller's
		if len(got) != len(w)+1 || (got[0] != "gets"+place && got[0] != "pop"+place && !strings.HasPrefix(got[0], "pop (<internal:thread_sync>:")) ||
			strings.Join(got[1:], "\n") != strings.Join(w, "\n") {
			t.Errorf("%v: thread %s:\ngot\n%s\nwant gets or pop%s, then\n%s", args, tid,
				strings.Join(got, "\n"), place, strings.Join(w, "\n"))
		}
	}
	if len(threads) != len(want) {
		t.Errorf("%v: Ruby frames in %d threads, want %d", args, len(threads), len(want))
	}
}

// TestDumpRubyRoot: the same as TestDumpRuby for the ruby of another
// root directory, $REWIND_RUBY_ROOT (a Debian trixie root with ruby
// installed: Ruby 3.3, whose libruby hides ruby_current_vm_ptr and
// rb_vm_exec), the program run chrooted there; the core is read with
// --sysroot. 3.3's Queue#pop is Ruby (<internal:thread_sync>), shown
// as caller_locations would show it.
func TestDumpRubyRoot(t *testing.T) {
	root := os.Getenv("REWIND_RUBY_ROOT")
	if root == "" {
		t.Skip("set REWIND_RUBY_ROOT to a root directory with /usr/bin/ruby (e.g. a Debian trixie debootstrap, ruby installed)")
	}
	if _, err := os.Stat(filepath.Join(root, "usr/bin/ruby")); err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile("../../../runtimes/ruby/testdata/park.rb")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(filepath.Join(root, "tmp"), "rewind-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	inside := strings.TrimPrefix(dir, filepath.Clean(root))
	if err := os.WriteFile(filepath.Join(dir, "park.rb"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/usr/bin/ruby", inside+"/park.rb", inside+"/report")
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	p, want := startRubyCmd(t, cmd, filepath.Join(dir, "report"))
	checkRubyDump(t, []string{"dump", strconv.Itoa(p.PID)}, want, "")
	checkRubyDump(t, []string{"dump", "--core", fixture.Gcore(t, p), "--sysroot", root}, want, "")
}

// checkRubyJSON: --json gives each Ruby frame as Python's are, with
// method "ruby", as many as caller_locations (and the parking calls).
func checkRubyJSON(t *testing.T, pid int, want map[string][]string) {
	out, errOut, code := run(t, "dump", "--json", strconv.Itoa(pid))
	if code != 0 {
		t.Fatalf("--json: exit %d: %s", code, errOut)
	}
	var rep struct {
		Threads []struct {
			Frames []map[string]any `json:"frames"`
		} `json:"threads"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	n, wantN := 0, 0
	for _, w := range want {
		wantN += len(w) + 1
	}
	for _, th := range rep.Threads {
		for _, f := range th.Frames {
			if f["method"] != "ruby" {
				continue
			}
			n++
			if f["pc"] != nil || f["module"] != nil || f["offset"] != nil || f["function"] == nil || f["file"] == nil || f["line"] == nil {
				t.Errorf("--json: Ruby frame %v", f)
			}
		}
	}
	if n != wantN {
		t.Errorf("--json: %d Ruby frames, want %d", n, wantN)
	}
}

// TestDumpRubyUnknown: a process whose libruby is of a version rewind
// has no layout for is dumped with its native frames and one line
// saying so.
func TestDumpRubyUnknown(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skipf("no gcc: %v", err)
	}
	dir := t.TempDir()
	lib := filepath.Join(dir, "libruby-9.9.so")
	write := func(name, code string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(code), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	libSrc := write("lib.c", "const char ruby_version[] = \"9.9.0\";\nvoid *ruby_current_vm_ptr;\n")
	mainSrc := write("main.c", "#include <stdio.h>\n#include <unistd.h>\nextern const char ruby_version[];\n"+
		"int main(void) { printf(\"%s\\nready\\n\", ruby_version); fflush(stdout); for (;;) pause(); }\n")
	exe := filepath.Join(dir, "fakeruby")
	for _, c := range [][]string{{"-shared", "-fPIC", "-o", lib, libSrc},
		{"-o", exe, mainSrc, "-L" + dir, "-l:libruby-9.9.so", "-Wl,-rpath," + dir}} {
		if out, err := exec.Command("gcc", c...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", c, err, out)
		}
	}
	p := fixture.Start(t, exe)
	out, errOut, code := run(t, "dump", strconv.Itoa(p.PID))
	if code != 0 || !strings.Contains(out, "main") || strings.Contains(out, "[ruby]") {
		t.Fatalf("exit %d, want native frames only:\n%s\n%s", code, out, errOut)
	}
	if n := strings.Count(errOut, "Ruby 9.9.0"); n != 1 || strings.Count(errOut, "\n") != 1 {
		t.Errorf("want one line about Ruby 9.9.0 on stderr, got:\n%s", errOut)
	}
}
