package luajit

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rewindstack/rewind/internal/procmaps"
	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/target"
)

// TestDuringCopies: in the threads' pause the lua_State a parked
// thread runs and its Lua stack (which holds L->base: the frames) are
// copied (During), and Attach walks over those copies to the thread's
// Lua frames.
func TestDuringCopies(t *testing.T) {
	if _, err := exec.LookPath("luajit"); err != nil {
		t.Skip("no luajit: ", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("reading another process's memory needs root")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "park.lua")
	script := "local function park() print('ready') io.stdout:flush() io.read() end\npark()\n"
	if err := os.WriteFile(src, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	cmd := exec.Command("luajit", src)
	cmd.Stdin = r
	p := fixture.StartCmd(t, cmd)
	maps, err := procmaps.Read(p.PID)
	if err != nil {
		t.Fatal(err)
	}
	lv, err := registered{}.Live(p.PID, maps)
	if err != nil || lv == nil {
		t.Fatalf("LuaJIT not found: %v", err)
	}
	rl := lv.(*registeredLive)
	var tg *target.Target
	err = live.WithStopped(p.PID, live.Options{}, func(s *live.Snapshot) error {
		rl.During(s.Reader())
		tg = s.Target(&target.Objects{}, nil)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rl.copies) != 2 || len(rl.copies[0].Data) != stateCopy {
		t.Fatalf("copies %d, want the lua_State and its stack", len(rl.copies))
	}
	base := binary.LittleEndian.Uint64(rl.copies[0].Data[LayoutGC64.LBase:])
	if st := rl.copies[1]; base <= st.Addr || base > st.Addr+uint64(len(st.Data)) {
		t.Errorf("L->base %#x is not in the copied stack [%#x, +%d)", base, st.Addr, len(st.Data))
	}
	rl.Attach(tg, func(s string) { t.Log(s) })
	var names []string
	for _, st := range tg.Contexts[0].Interp {
		for _, f := range st.Frames {
			names = append(names, f.Function)
		}
	}
	if len(names) < 3 || names[0] != "read" || names[1] != "park" || names[2] != "main chunk" {
		t.Errorf("Lua frames %q, want read, park, main chunk", names)
	}
}
