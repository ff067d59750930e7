package fibers_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rewindstack/rewind/corefile"
	"github.com/rewindstack/rewind/fibers"
	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/output"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
)

// startTarantool runs testdata/tarantool_app.lua in Debian's tarantool,
// with env added to its environment, and returns it with the path of its
// fiber.info() YAML.
func startTarantool(t *testing.T, env ...string) (*fixture.Proc, string) {
	t.Helper()
	bin, err := exec.LookPath("tarantool")
	if err != nil {
		t.Skip("tarantool not installed (Debian: tarantool)")
	}
	if live.HostArch != regs.AMD64 {
		t.Skipf("Tarantool's fibers are checked on x86-64 (this is %s)", live.HostArch)
	}
	dir := t.TempDir()
	app, err := filepath.Abs("testdata/tarantool_app.lua")
	if err != nil {
		t.Fatal(err)
	}
	info := filepath.Join(dir, "info.yaml")
	cmd := exec.Command(bin, app)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "FIBER_INFO="+info), env...)
	return fixture.StartCmd(t, cmd), info
}

// fiberInfo parses fiber.info()'s YAML: per fiber id, the addresses of its
// C frames from #1 on (Tarantool's own #0 is where fiber.info() looked,
// not where the fiber parked), and its Lua frames ("NAME in SOURCE at line
// N").
func fiberInfo(t *testing.T, path string) (map[int64][]uint64, map[int64][]string) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64][]uint64{}
	lua := map[int64][]string{}
	var fid int64
	head := regexp.MustCompile(`^(\d+):$`)
	cframe := regexp.MustCompile(`C: '#(\d+)\s+0x([0-9a-f]+) in `)
	lframe := regexp.MustCompile(`L: (.*) in (\S+) at line (-?\d+)`)
	for _, line := range foldYAML(string(b)) {
		if m := head.FindStringSubmatch(line); m != nil {
			fid, _ = strconv.ParseInt(m[1], 10, 64)
			out[fid] = []uint64{}
			continue
		}
		if m := cframe.FindStringSubmatch(line); m != nil && m[1] != "0" {
			pc, _ := strconv.ParseUint(m[2], 16, 64)
			out[fid] = append(out[fid], pc)
		}
		if m := lframe.FindStringSubmatch(line); m != nil {
			lua[fid] = append(lua[fid], m[1]+" "+m[2]+" "+m[3])
		}
	}
	return out, lua
}

// foldYAML splits YAML into lines, joining a backtrace item's scalar
// that the encoder folded onto more-indented lines (a chunk path long
// enough puts "at line" and the number on two lines) back into one.
func foldYAML(s string) []string {
	var lines []string
	indent := func(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }
	for _, line := range strings.Split(s, "\n") {
		if n := len(lines); n > 0 && strings.TrimSpace(line) != "" {
			prev := lines[n-1]
			if strings.HasPrefix(strings.TrimLeft(prev, " "), "- ") && indent(line) > indent(prev)+2 {
				lines[n-1] = prev + " " + strings.TrimSpace(line)
				continue
			}
		}
		lines = append(lines, line)
	}
	return lines
}

func tarantoolLive(t *testing.T, pid int) (*target.Target, *output.Report) {
	t.Helper()
	var warnings []string
	fc := fibers.NewCopier(pid, nil, true, func(s string) { warnings = append(warnings, s) })
	snap, err := live.Capture(pid, live.Options{During: fc.During})
	if err != nil {
		t.Fatal(err)
	}
	tg := snap.Target(nil, nil)
	tg.Contexts = append(tg.Contexts, fc.Contexts(tg, func(s string) { warnings = append(warnings, s) })...)
	if len(warnings) > 0 {
		t.Errorf("warnings: %v", warnings)
	}
	return tg, unwindAll(t, tg, "auto")
}

// checkTarantool: every fiber the script made is found, named, under the
// main thread, parked where it waits, with the C frames fiber.info()
// printed for it below #0, down to libcoro's coro_init, and its Lua frames
// (name, chunk, line) as fiber.info() prints them.
func checkTarantool(t *testing.T, rep *output.Report, pid int, info map[int64][]uint64, luaInfo map[int64][]string) {
	t.Helper()
	byName := map[string]output.Fiber{}
	for _, f := range rep.Fibers {
		if f.Kind != "tarantool" || f.ID == nil || f.Name == nil {
			t.Errorf("fiber %+v: want kind tarantool with an id and a name", f)
			continue
		}
		byName[*f.Name] = f
	}
	want := map[string]string{"sleeper1": "lbox_fiber_sleep", "sleeper2": "lbox_fiber_sleep", "sleeper3": "lbox_fiber_sleep",
		"waiter": "fiber_channel_get_msg_timeout", "stitched": "lbox_fiber_sleep"}
	for name, fn := range want {
		f, ok := byName[name]
		if !ok {
			t.Errorf("fiber %s not found; fibers: %v", name, keys(byName))
			continue
		}
		if f.Thread == nil || *f.Thread != pid {
			t.Errorf("fiber %s: thread %v, want the main thread %d", name, f.Thread, pid)
		}
		if len(f.Frames) < 3 || f.Frames[0].Function != "fiber_yield_timeout" || f.Frames[1].Function != fn ||
			f.Frames[len(f.Frames)-1].Function != "coro_init" {
			t.Errorf("fiber %s:%s", name, names(f.Frames))
		}
		var got []uint64
		var lua []string
		for _, fr := range f.Frames[1:] {
			if fr.Interpreted {
				n := fr.Function
				if n == "" {
					n = "(unnamed)"
				}
				lua = append(lua, fmt.Sprintf("%s %s %d", n, fr.File, fr.Line))
				continue
			}
			got = append(got, fr.PC)
		}
		if ws := info[*f.ID]; fmt.Sprint(got) != fmt.Sprint(ws) {
			t.Errorf("fiber %s (%d): rewind %x, fiber.info() %x", name, *f.ID, got, ws)
		}
		if wl := luaInfo[*f.ID]; len(wl) == 0 || fmt.Sprint(lua) != fmt.Sprint(wl) {
			t.Errorf("fiber %s (%d): Lua frames\nrewind      %q\nfiber.info() %q", name, *f.ID, lua, wl)
		}
	}
	if f, ok := byName["on_shutdown"]; !ok || !f.NeverRan {
		t.Errorf("Tarantool's on_shutdown fiber: %+v, want it listed as never ran", f)
	}
}

func keys(m map[string]output.Fiber) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestTarantoolLive: Debian's Tarantool, its fibers found in the pause
// through its DWARF types, compared with its own fiber.info().
func TestTarantoolLive(t *testing.T) {
	p, infoPath := startTarantool(t)
	_, rep := tarantoolLive(t, p.PID)
	info, luaInfo := fiberInfo(t, infoPath)
	checkTarantool(t, rep, p.PID, info, luaInfo)
}

// TestTarantoolCore: the same from a gcore core.
func TestTarantoolCore(t *testing.T) {
	p, infoPath := startTarantool(t)
	core := fixture.Gcore(t, p)
	c, err := corefile.Open(core)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tg, err := c.Target(nil, "")
	if err != nil {
		t.Fatal(err)
	}
	var warnings []string
	tg.Contexts = append(tg.Contexts, fibers.FromCore(tg, nil, true, func(s string) { warnings = append(warnings, s) })...)
	if len(warnings) > 0 {
		t.Errorf("warnings: %v", warnings)
	}
	info, luaInfo := fiberInfo(t, infoPath)
	checkTarantool(t, unwindAll(t, tg, "auto"), p.PID, info, luaInfo)
}

// TestTarantoolMatchesGdb: gdb, given each fiber's registers as rewind
// read them from its libcoro context (set, bt, restored), shows the same
// functions; the contexts are read live and from a gcore core of the
// parked process (gdb walks the core's saved context in the process).
func TestTarantoolMatchesGdb(t *testing.T) {
	if _, err := exec.LookPath("gdb"); err != nil {
		t.Skip("gdb not installed")
	}
	p, _ := startTarantool(t)
	t.Run("live", func(t *testing.T) {
		tg, rep := tarantoolLive(t, p.PID)
		compareTarantoolWithGdb(t, p.PID, tg, rep)
	})
	t.Run("core", func(t *testing.T) {
		c, err := corefile.Open(fixture.Gcore(t, p))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		tg, err := c.Target(nil, "")
		if err != nil {
			t.Fatal(err)
		}
		tg.Contexts = append(tg.Contexts, fibers.FromCore(tg, nil, true, func(string) {})...)
		compareTarantoolWithGdb(t, p.PID, tg, unwindAll(t, tg, "auto"))
	})
}

// compareTarantoolWithGdb has gdb walk the saved context of each of the
// fixture's four parked fibers in process pid and compares the functions.
func compareTarantoolWithGdb(t *testing.T, pid int, tg *target.Target, rep *output.Report) {
	t.Helper()
	eachParkedFiber(t, tg, rep, func(f *output.Fiber, c *target.Context) {
		want, out := gdbBacktrace(t, pid, c.Regs)
		if got := functions(f.Frames); len(want) < 4 || !sameFunctions(got, want) {
			t.Errorf("fiber %s: rewind %v\ngdb %v\n%s", *f.Name, got, want, out)
		}
	})
}

// eachParkedFiber calls check with each of the fixture's four parked
// fibers (the sleepers and the waiter) in rep and its context in tg, and
// fails t unless it found all four.
func eachParkedFiber(t *testing.T, tg *target.Target, rep *output.Report, check func(f *output.Fiber, c *target.Context)) {
	t.Helper()
	var ctxs []*target.Context
	for i := range tg.Contexts {
		if tg.Contexts[i].Kind == target.KindFiber {
			ctxs = append(ctxs, &tg.Contexts[i])
		}
	}
	if len(ctxs) != len(rep.Fibers) {
		t.Fatalf("%d fiber contexts, %d fibers in the report", len(ctxs), len(rep.Fibers))
	}
	checked := 0
	for i, c := range ctxs {
		f := &rep.Fibers[i]
		if f.Name == nil || !strings.HasPrefix(*f.Name, "sleeper") && *f.Name != "waiter" {
			continue
		}
		check(f, c)
		checked++
	}
	if checked != 4 {
		t.Errorf("%d fibers compared with gdb, want 4", checked)
	}
}

// TestFoldYAML: the Lua frame Tarantool's YAML encoder folded at 80
// columns (as it does for this worktree's chunk path) reads as one line.
func TestFoldYAML(t *testing.T) {
	in := "104:\n  backtrace:\n  - L: sleeper_inner in @/a/long/path/tarantool_app.lua at line\n      12\n  - C: '#2  0x5ecd27 in lj_BC_FUNCC+52'\n  memory:\n    total: 516472\n"
	got := foldYAML(in)
	want := []string{"104:", "  backtrace:", "  - L: sleeper_inner in @/a/long/path/tarantool_app.lua at line 12",
		"  - C: '#2  0x5ecd27 in lj_BC_FUNCC+52'", "  memory:", "    total: 516472", ""}
	if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
		t.Errorf("foldYAML:\n got %q\nwant %q", got, want)
	}
}

// TestTarantoolWithoutDWARF: Tarantool without its debug information is
// recognized, and said to have an unknown layout; no fiber is guessed,
// live or from a core.
func TestTarantoolWithoutDWARF(t *testing.T) {
	bin, err := exec.LookPath("tarantool")
	if err != nil {
		t.Skip("tarantool not installed (Debian: tarantool)")
	}
	stripped := filepath.Join(t.TempDir(), "tarantool")
	if out, err := exec.Command("objcopy", "--strip-debug", bin, stripped).CombinedOutput(); err != nil {
		t.Fatalf("objcopy --strip-debug: %v\n%s", err, out)
	}
	if tt, err := fibers.NewTarantool(stripped); tt != nil || !errors.Is(err, fibers.ErrTarantoolLayout) {
		t.Fatalf("NewTarantool of %s: %v, %v; want ErrTarantoolLayout", stripped, tt, err)
	}
	if live.HostArch != regs.AMD64 {
		t.Skipf("Tarantool's fibers are checked on x86-64 (this is %s)", live.HostArch)
	}
	app, _ := filepath.Abs("testdata/tarantool_app.lua")
	cmd := exec.Command(stripped, app)
	cmd.Dir = t.TempDir()
	p := fixture.StartCmd(t, cmd)
	var warnings []string
	fc := fibers.NewCopier(p.PID, nil, true, func(s string) { warnings = append(warnings, s) })
	var opt live.Options
	fc.Apply(&opt)
	snap, err := live.Capture(p.PID, opt)
	if err != nil {
		t.Fatal(err)
	}
	tg := snap.Target(nil, nil)
	ctxs := fc.Contexts(tg, func(s string) { warnings = append(warnings, s) })
	if len(ctxs) != 0 || len(warnings) != 1 || !strings.Contains(warnings[0], "layout is unknown") {
		t.Errorf("%d fiber contexts, warnings %q; want none and the unknown layout said", len(ctxs), warnings)
	}
}

// TestScanTarantool: --fiber-scan, which knows no Tarantool structure,
// finds the libcoro context of every fiber fiber.info() lists (the
// contexts' addresses read through Tarantool's DWARF types, as --fibers
// does), in the app with its eight fibers only. The last fiber made
// (stitched) shares one mapping with its stack in Tarantool's slab arena:
// the scan missed it when a pointer to a record had to lie in another
// mapping (see sameMappingGap). Past Phantoms, the scan's contexts are
// the fibers and nothing else (the process's threads leave saved contexts
// on their own stacks: start_thread's jmp_buf).
func TestScanTarantool(t *testing.T) {
	p, infoPath := startTarantool(t, "NAPS=0")
	_, rep := tarantoolLive(t, p.PID)
	info, _ := fiberInfo(t, infoPath)
	want := map[fibers.Spec]string{}
	for _, f := range rep.Fibers {
		if f.ID == nil || f.Name == nil {
			continue
		}
		if _, ok := info[*f.ID]; !ok {
			t.Errorf("fiber %d %s is not in fiber.info()", *f.ID, *f.Name)
		}
		want[fibers.Spec{Kind: fibers.Coro, Addr: f.Context}] = fmt.Sprintf("%d %s", *f.ID, *f.Name)
	}
	if len(want) != len(info) || len(info) != 8 {
		t.Fatalf("%d fibers read through DWARF, %d in fiber.info(), want 8", len(want), len(info))
	}
	// The machine may be loaded: the default limit of 2 s could stop the
	// scan before it reads the arena; what it finds is under test here.
	all, st, err := fibers.ScanLive(p.PID, fibers.ScanLimits{MaxTime: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	got := keptLive(t, p.PID, all)
	found := map[fibers.Spec]bool{}
	for _, sp := range got {
		found[sp] = true
	}
	for sp, name := range want {
		if !found[sp] {
			t.Errorf("fiber %s (%v) not found by the scan", name, sp)
		}
	}
	if len(got) != len(want) {
		t.Errorf("scan found %d contexts, want the %d fibers: %v", len(got), len(want), got)
	}
	if st.Stop != "" {
		t.Errorf("scan stopped early: %s", st.Note())
	}
}
