package ruby_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/corefile"
	"github.com/rewindstack/rewind/internal/procmaps"
	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/runtimes"
	"github.com/rewindstack/rewind/runtimes/ruby"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

func TestMain(m *testing.M) { os.Exit(fixture.Main(m)) }

// rubyExe is Debian's Ruby (3.1 on bookworm).
const rubyExe = "/usr/bin/ruby"

// startPark runs testdata/park.rb with extra more threads, its stdin a
// pipe nobody writes, and returns it with what caller_locations said
// of each thread (by native thread id: "label\tpath\tline" a frame).
func startPark(tb testing.TB, extra int) (*fixture.Proc, map[int][]string) {
	tb.Helper()
	if _, err := os.Stat(rubyExe); err != nil {
		tb.Skipf("no %s: %v", rubyExe, err)
	}
	script, err := filepath.Abs("testdata/park.rb")
	if err != nil {
		tb.Fatal(err)
	}
	report := filepath.Join(tb.TempDir(), "report")
	r, w, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { w.Close() })
	cmd := exec.Command(rubyExe, script, report, strconv.Itoa(extra))
	cmd.Stdin = r
	p := fixture.StartCmd(tb, cmd)
	r.Close()
	b, err := os.ReadFile(report)
	if err != nil || !strings.HasSuffix(string(b), "\nEND\n") {
		tb.Fatalf("report: %v\n%s", err, b)
	}
	want := map[int][]string{}
	tid := 0
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\nEND\n"), "\n") {
		if s, ok := strings.CutPrefix(line, "THREAD "); ok {
			if tid, err = strconv.Atoi(s); err != nil {
				tb.Fatalf("report: %q", line)
			}
			continue
		}
		want[tid] = append(want[tid], line)
	}
	return p, want
}

// parkCalls are the C methods park.rb's threads block in, above the
// frames caller_locations gave.
var parkCalls = map[string]bool{"pop": true, "gets": true}

// compare checks that each thread's Ruby frames are what
// caller_locations said, below the C method it parks in (which shows
// its caller's place, as caller_locations shows a C method).
func compare(t *testing.T, what string, s *ruby.Stacks, want map[int][]string) {
	t.Helper()
	got := map[int]*ruby.Thread{}
	for i := range s.Threads {
		got[s.Threads[i].TID] = &s.Threads[i]
	}
	for tid, w := range want {
		th := got[tid]
		if th == nil {
			t.Errorf("%s: no Ruby thread %d", what, tid)
			continue
		}
		if th.End != "" {
			t.Errorf("%s: thread %d cut: %s: %s", what, tid, th.End, th.Detail)
		}
		var lines []string
		for _, f := range th.Frames {
			lines = append(lines, fmt.Sprintf("%s\t%s\t%d", f.Label, f.Path, f.Line))
		}
		if len(th.Frames) != len(w)+1 || !th.Frames[0].CFunc || !parkCalls[th.Frames[0].Label] ||
			lines[0] != th.Frames[0].Label+"\t"+strings.SplitN(w[0], "\t", 2)[1] ||
			strings.Join(lines[1:], "\n") != strings.Join(w, "\n") {
			t.Errorf("%s: thread %d:\ngot\n%s\nwant a parking C method, then\n%s", what, tid,
				strings.Join(lines, "\n"), strings.Join(w, "\n"))
		}
	}
}

// checkSplice attaches s to tg, unwinds it, and checks that every
// thread's Ruby frames are all in the output, each run of them just
// above an rb_vm_exec frame, as many runs as activations.
func checkSplice(t *testing.T, what string, tg *target.Target, s *ruby.Stacks) {
	t.Helper()
	ruby.Attach(tg, s, func(msg string) { t.Errorf("%s: %s", what, msg) })
	u, err := unwind.ByName("auto")
	if err != nil {
		t.Fatal(err)
	}
	rep := stacks.Unwind(tg, stacks.Options{Unwinder: u}, &symbolize.Symbolizer{})
	read := map[int]*ruby.Thread{}
	for i := range s.Threads {
		read[s.Threads[i].TID] = &s.Threads[i]
	}
	for _, th := range rep.Threads {
		n, runs := 0, 0
		var text []string
		for i, f := range th.Frames {
			text = append(text, f.Function)
			if !f.Interpreted {
				continue
			}
			n++
			if i+1 == len(th.Frames) || !th.Frames[i+1].Interpreted {
				runs++
				if i+1 == len(th.Frames) || th.Frames[i+1].Function != ruby.Entry {
					t.Errorf("%s: thread %d: Ruby frame %s is not followed by %s", what, th.TID, f.Function, ruby.Entry)
				}
			}
		}
		rt := read[th.TID]
		if rt == nil {
			if n != 0 {
				t.Errorf("%s: thread %d is no Ruby thread but has %d Ruby frames", what, th.TID, n)
			}
			continue
		}
		acts := 0
		if k := len(rt.Frames); k > 0 {
			acts = rt.Frames[k-1].Activation + 1
		}
		if n != len(rt.Frames) || runs != acts {
			t.Errorf("%s: thread %d: %d Ruby frames in %d runs in the output, %d read in %d activations:\n%s",
				what, th.TID, n, runs, len(rt.Frames), acts, strings.Join(text, "\n"))
		}
	}
}

// TestMatchesCallerLocations: every Ruby frame of every thread of
// park.rb (a method chain, recursion, a block given to each, a method
// made by define_method, a Proc, a class method, a method whose line
// table needs the succinct index's blocks; all parked in a C method) is
// what the thread's own caller_locations said, live (read in the
// threads' pause) and from a gcore core; spliced, each activation's
// frames sit just above an rb_vm_exec frame.
func TestMatchesCallerLocations(t *testing.T) {
	p, want := startPark(t, 0)
	maps, err := procmaps.Read(p.PID)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := ruby.Find(maps, runtimes.ProcessFile(p.PID))
	if err != nil || rt == nil {
		t.Fatalf("Find: %v, %v", rt, err)
	}
	if !strings.HasPrefix(rt.Version, "3.1.") || rt.Symbols == 0 {
		t.Fatalf("runtime %+v", rt)
	}
	l := ruby.NewLive(p.PID, rt)
	l.Prepare()
	// No bound on the pause: on a loaded machine stopping the threads can
	// take past the default, and the stacks compared are to be the
	// pause's.
	snap, err := live.Capture(p.PID, live.Options{During: l.During, MaxPause: -1})
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.Stacks()
	if err != nil || l.Unchecked || l.InPause == 0 || l.Pages == 0 {
		t.Fatalf("live: %v (unchecked %v, %v in the pause, %d pages re-read)", err, l.Unchecked, l.InPause, l.Pages)
	}
	compare(t, "live", s, want)
	checkSplice(t, "live", snap.Target(nil, nil), s)

	c, err := corefile.Open(fixture.Gcore(t, p))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tg, err := c.Target(nil, p.Exe)
	if err != nil {
		t.Fatal(err)
	}
	crt, err := ruby.Find(runtimes.Maps(tg.Space), runtimes.CoreFiles(tg.Space))
	if err != nil || crt == nil {
		t.Fatalf("Find in the core: %v, %v", crt, err)
	}
	cs, err := crt.Read(tg.Mem)
	if err != nil {
		t.Fatal(err)
	}
	compare(t, "core", cs, want)
	checkSplice(t, "core", tg, cs)

	// Without the kernel tids (3.0 keeps none) the threads are matched by
	// their pthread_t, the thread pointer the core's notes give.
	byTP := *cs
	byTP.Threads = append([]ruby.Thread(nil), cs.Threads...)
	for i := range byTP.Threads {
		byTP.Threads[i].TID = 0
	}
	for i := range tg.Contexts {
		tg.Contexts[i].Interp = nil
	}
	ruby.Attach(tg, &byTP, func(msg string) { t.Errorf("by pthread_t: %s", msg) })
	for _, c := range tg.Contexts {
		n := 0
		for _, st := range c.Interp {
			n += len(st.Frames)
		}
		if w, ok := want[c.TID]; ok && n != len(w)+1 {
			t.Errorf("by pthread_t: thread %d has %d Ruby frames, want %d", c.TID, n, len(w)+1)
		}
	}
}

// TestUnsupportedVersion: a libruby whose ruby_version rewind has no
// layout for is found and refused, with the version in the error.
func TestUnsupportedVersion(t *testing.T) {
	lib := fakeLibruby(t, "9.9.0")
	maps := []target.Mapping{{Start: 0x10000, End: 0x11000, Path: lib}}
	rt, err := ruby.Find(maps, func(*target.Mapping) string { return lib })
	if _, ok := err.(*ruby.UnsupportedError); !ok || rt != nil || !strings.Contains(err.Error(), "Ruby 9.9.0") {
		t.Fatalf("Find: %v, %v; want an UnsupportedError for 9.9.0", rt, err)
	}
	if rt, err := ruby.Find(maps[:0], nil); rt != nil || err != nil {
		t.Errorf("no mappings: %v, %v", rt, err)
	}
}

// fakeLibruby builds a shared library named libruby-V.so that defines
// the two symbols Find looks for, ruby_version being version.
func fakeLibruby(t *testing.T, version string) string {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skipf("no gcc: %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "fake.c")
	code := fmt.Sprintf("const char ruby_version[] = %q;\nvoid *ruby_current_vm_ptr;\n", version)
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, "libruby-"+version+".so")
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return lib
}
