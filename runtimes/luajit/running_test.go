package luajit_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rewindstack/rewind/dump"
)

// luaSpin writes its traceback from spin, then runs a loop in it for
// ever: in the interpreter (arg[2] "nojit") or as a JIT trace.
const luaSpin = `if arg[2] == "nojit" then jit.off() end
local out = assert(io.open(arg[1], "w"))
local x = 0
local function spin()
  out:write(debug.traceback(), "\n") out:close() print("ready") io.stdout:flush()
  while true do
    x = x + 1
  end
end
local function outer() spin() end
outer()
`

// startSpinning runs luaSpin, which never sleeps (fixture.Start waits
// for sleep), killed with the test.
func startSpinning(t *testing.T, mode string) (int, []luaFrame) {
	t.Helper()
	if _, err := exec.LookPath("luajit"); err != nil {
		t.Skip("no luajit: ", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("reading another process's memory needs root")
	}
	dir := t.TempDir()
	src, report := filepath.Join(dir, "LuaSpin.lua"), filepath.Join(dir, "traceback")
	if err := os.WriteFile(src, []byte(luaSpin), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("luajit", "LuaSpin.lua", report, mode)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || sc.Text() != "ready" {
		t.Fatalf("luajit did not print ready: %v", sc.Err())
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	tbs := parseTraceback(t, string(b))
	if len(tbs) != 1 || len(tbs[0]) < 3 {
		t.Fatalf("traceback %q", b)
	}
	return cmd.Process.Pid, tbs[0]
}

// TestRunningLua: a thread stopped while it runs Lua code has its Lua
// frames from the interpreter's registers (L->base is then that of its
// last call out of Lua): spin at the loop's line in the interpreter, at
// line 0 (unknown, with a warning) in a JIT trace; then the frames the
// script's traceback printed below spin. Never other frames.
func TestRunningLua(t *testing.T) {
	for _, mode := range []string{"nojit", "jit"} {
		t.Run(mode, func(t *testing.T) {
			pid, tb := startSpinning(t, mode)
			for range 3 { // stopped at a different instant each time
				var warns []string
				rep, err := dump.Live(pid, dump.Options{Warn: func(s string) { warns = append(warns, s) }})
				if err != nil {
					t.Fatal(err)
				}
				got := luaFrames(rep.Threads[0].Frames)
				if len(got) != len(tb) || got[0].Function != "spin" || got[0].File != "LuaSpin.lua" {
					t.Fatalf("Lua frames %v, want spin and then %v; warnings %q", got, tb[1:], warns)
				}
				switch l := got[0].Line; {
				case l == 6 || l == 7:
				case l == 0 && mode == "jit" && strings.Contains(fmt.Sprint(warns), "runs code the JIT compiled"):
				default:
					t.Errorf("spin at line %d; warnings %q", l, warns)
				}
				if fmt.Sprint(got[1:]) != fmt.Sprint(tb[1:]) {
					t.Errorf("Lua frames below spin\nrewind          %v\ndebug.traceback %v", got[1:], tb[1:])
				}
			}
		})
	}
}
