package luajit_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/dump"
	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/output"
)

func TestMain(m *testing.M) { os.Exit(fixture.Main(m)) }

// luaPark is the example: lua_a -> lua_b -> lua_c parked in
// io.read, on the line that prints the script's own traceback.
const luaPark = `local out = assert(io.open(arg[1], "w"))
local function lua_c() out:write(debug.traceback(), "\n") out:close() print("ready") io.stdout:flush() io.read() end
function lua_b() lua_c()
end
function lua_a() lua_b()
end
lua_a()
`

// luaRich parks in a table.sort comparator (a C function calling back
// into Lua) under pcall, a method (TGETS name), recursion and an
// upvalue, with suspended coroutines and one never resumed; it writes
// the traceback of the parked point and of each suspended coroutine.
const luaRich = `local out = assert(io.open(arg[1], "w"))
local obj = {}
local parked = false
local function park() out:write(debug.traceback(), "\n") out:close() print("ready") io.stdout:flush() io.read() end
local up = park
function obj:method(n)
  if n > 0 then return 1 + self:method(n - 1) end
  local t = {3, 1, 2}
  table.sort(t, function(a, b) if not parked then parked = true; up() end return a < b end)
  return 1
end
local function rec(n)
  if n == 0 then return pcall(obj.method, obj, 2) end
  local r = rec(n - 1)
  return r
end
local cos = {}
for i = 1, 3 do
  local co = coroutine.create(function(x)
    local function inner(y) coroutine.yield(y) end
    inner(x)
  end)
  coroutine.resume(co, i)
  cos[i] = co
  out:write("coroutine\n", debug.traceback(co), "\n")
end
cos[4] = coroutine.create(function() end)
rec(3)
`

// luaFrame is one Lua frame as compared: function, file, line.
type luaFrame struct {
	Function, File string
	Line           int
}

var tbLine = regexp.MustCompile(`^\t(.*?):(?:(\d+):)? (?:in function '(.*)'|in main chunk|in function (<.*>)|at 0x[0-9a-f]+)$`)

// parseTraceback reads debug.traceback()'s levels as rewind names them:
// "in function 'f'" is f, "in main chunk" "main chunk", "in function
// <file:N>" that, and a C function without a name (at 0x...) none.
func parseTraceback(t *testing.T, text string) [][]luaFrame {
	var out [][]luaFrame
	for _, l := range strings.Split(text, "\n") {
		switch {
		case l == "stack traceback:":
			out = append(out, nil)
		case strings.HasPrefix(l, "\t") && len(out) > 0:
			m := tbLine.FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("traceback line %q", l)
			}
			f := luaFrame{File: m[1]}
			f.Line, _ = strconv.Atoi(m[2])
			switch {
			case m[3] != "":
				f.Function = m[3]
			case m[4] != "":
				f.Function = m[4]
			case strings.Contains(l, "in main chunk"):
				f.Function = "main chunk"
			}
			out[len(out)-1] = append(out[len(out)-1], f)
		}
	}
	return out
}

func luaFrames(fs []output.Frame) []luaFrame {
	var out []luaFrame
	for _, f := range fs {
		if f.Interpreted && f.Method == "lua" {
			out = append(out, luaFrame{f.Function, f.File, f.Line})
		}
	}
	return out
}

// startLua runs script under /usr/bin/luajit, parked with its stdin a
// pipe nothing writes to, and returns it with the tracebacks it wrote.
func startLua(t *testing.T, script string) (*fixture.Proc, [][]luaFrame) {
	t.Helper()
	if _, err := exec.LookPath("luajit"); err != nil {
		t.Skip("no luajit: ", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("reading another process's memory needs root")
	}
	dir := t.TempDir()
	src, report := filepath.Join(dir, "LuaPark.lua"), filepath.Join(dir, "traceback")
	if err := os.WriteFile(src, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	cmd := exec.Command("luajit", "LuaPark.lua", report)
	cmd.Dir, cmd.Stdin = dir, r
	p := fixture.StartCmd(t, cmd)
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	return p, parseTraceback(t, string(b))
}

// checkThread: the main thread's Lua frames are io.read's, then those
// the script's traceback printed, in order.
func checkThread(t *testing.T, rep *output.Report, pid int, want []luaFrame) {
	t.Helper()
	for _, th := range rep.Threads {
		if th.TID != pid {
			continue
		}
		got := luaFrames(th.Frames)
		if len(got) == 0 || got[0] != (luaFrame{"read", "[C]", 0}) {
			t.Fatalf("innermost Lua frame: got %v, want io.read's", got)
		}
		if fmt.Sprint(got[1:]) != fmt.Sprint(want) {
			t.Errorf("Lua frames\nrewind          %v\ndebug.traceback %v", got[1:], want)
		}
		return
	}
	t.Fatalf("thread %d not in the dump", pid)
}

func dumps(t *testing.T, p *fixture.Proc) map[string]*output.Report {
	t.Helper()
	live, err := dump.Live(p.PID, dump.Options{AllFibers: true})
	if err != nil {
		t.Fatal(err)
	}
	core, err := dump.Core(fixture.Gcore(t, p), dump.Options{AllFibers: true})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]*output.Report{"live": live, "core": core}
}

// TestLuaPark: rewind's Lua frames of a parked luajit (Debian's: GC64,
// stripped) are the script's own debug.traceback(), live and from a
// gcore core.
func TestLuaPark(t *testing.T) {
	p, tbs := startLua(t, luaPark)
	want := []luaFrame{{"lua_c", "LuaPark.lua", 2}, {"lua_b", "LuaPark.lua", 3}, {"lua_a", "LuaPark.lua", 5},
		{"main chunk", "LuaPark.lua", 7}, {"", "[C]", 0}}
	if len(tbs) != 1 || fmt.Sprint(tbs[0]) != fmt.Sprint(want) {
		t.Fatalf("the script's traceback %v, want %v", tbs, want)
	}
	for name, rep := range dumps(t, p) {
		t.Run(name, func(t *testing.T) { checkThread(t, rep, p.PID, tbs[0]) })
	}
}

// TestLuaRich: a comparator table.sort calls back into Lua (a second
// activation of the VM), under pcall, a method and recursion, parked
// through an upvalue; and the suspended coroutines, each a fiber whose
// frames are its debug.traceback(co), and the one never resumed.
func TestLuaRich(t *testing.T) {
	p, tbs := startLua(t, luaRich)
	if len(tbs) != 4 {
		t.Fatalf("%d tracebacks, want 4", len(tbs))
	}
	for name, rep := range dumps(t, p) {
		t.Run(name, func(t *testing.T) {
			checkThread(t, rep, p.PID, tbs[3])
			var suspended []string
			never := 0
			for _, f := range rep.Fibers {
				if f.Kind != "lua" {
					continue
				}
				if f.NeverRan {
					never++
					continue
				}
				suspended = append(suspended, fmt.Sprint(luaFrames(f.Frames)))
			}
			if never != 1 || len(suspended) != 3 {
				t.Fatalf("%d never-ran and %d suspended coroutines, want 1 and 3", never, len(suspended))
			}
			for i, s := range suspended {
				if w := fmt.Sprint(tbs[i]); s != w {
					t.Errorf("coroutine %d\nrewind          %s\ndebug.traceback %s", i, s, w)
				}
			}
		})
	}
}

// TestCoroutinesUnlisted: without --fibers the coroutines are counted
// in a warning, not listed; the thread keeps its Lua frames.
func TestCoroutinesUnlisted(t *testing.T) {
	p, tbs := startLua(t, luaRich)
	var warns []string
	rep, err := dump.Live(p.PID, dump.Options{Warn: func(s string) { warns = append(warns, s) }})
	if err != nil {
		t.Fatal(err)
	}
	checkThread(t, rep, p.PID, tbs[3])
	if len(rep.Fibers) != 0 {
		t.Errorf("%d fibers without --fibers", len(rep.Fibers))
	}
	want := fmt.Sprintf("Lua frames: thread %d: 4 suspended coroutines not listed (--fibers lists them)", p.PID)
	if !slices.Contains(warns, want) {
		t.Errorf("warnings %q, want %q", warns, want)
	}
}

// TestNoLua: --no-lua leaves the frames and the coroutines out.
func TestNoLua(t *testing.T) {
	p, _ := startLua(t, luaRich)
	rep, err := dump.Live(p.PID, dump.Options{NoRuntimes: []string{"lua"}, AllFibers: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, th := range rep.Threads {
		if fs := luaFrames(th.Frames); len(fs) > 0 {
			t.Errorf("thread %d: Lua frames %v with the runtime off", th.TID, fs)
		}
	}
	if len(rep.Fibers) != 0 {
		t.Errorf("%d fibers with the runtime off", len(rep.Fibers))
	}
}

// luaCoroutines parks arg[2] coroutines in coroutine.yield, three Lua
// calls deep, and its main thread in io.read.
const luaCoroutines = `local out = assert(io.open(arg[1], "w")) out:close()
local n = tonumber(arg[2])
local function leaf(i) coroutine.yield(i) end
local function mid(i) leaf(i) end
local cos = {}
for i = 1, n do
  local co = coroutine.create(function(i) mid(i) end)
  coroutine.resume(co, i)
  cos[i] = co
end
print("ready") io.stdout:flush()
io.read()
`

// BenchmarkDumpCoroutines: a dump of a luajit with 10,000 suspended
// coroutines, with the Lua runtime and without it (--no-lua), plain
// (the coroutines counted) and with --fibers (each listed, as text);
// issue 41 asks for at most twice the time (scripts/bench-lua.sh times
// the command's).
func BenchmarkDumpCoroutines(b *testing.B) {
	if _, err := exec.LookPath("luajit"); err != nil || os.Geteuid() != 0 {
		b.Skip("needs luajit and root")
	}
	dir := b.TempDir()
	src := filepath.Join(dir, "co.lua")
	if err := os.WriteFile(src, []byte(luaCoroutines), 0o644); err != nil {
		b.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close(); w.Close() })
	cmd := exec.Command("luajit", src, filepath.Join(dir, "x"), "10000")
	cmd.Stdin = r
	p := fixture.StartCmd(b, cmd)
	for _, c := range []struct {
		name   string
		no     []string
		fibers bool
	}{{"lua", nil, false}, {"no-lua", []string{"lua"}, false}, {"fibers/lua", nil, true}, {"fibers/no-lua", []string{"lua"}, true}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				rep, err := dump.Live(p.PID, dump.Options{NoRuntimes: c.no, AllFibers: c.fibers})
				if err != nil {
					b.Fatal(err)
				}
				var buf strings.Builder
				if err := output.WriteText(&buf, rep); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
