package bpfunwind

import (
	"path/filepath"
	"runtime"
	"testing"

	"github.com/rewindstack/rewind/target"
)

// TestGoInfo: what the BPF walk crosses a Go program's stack switches
// with, for the program built as it is and stripped (-s -w: the
// functions from the pcln table, the offsets from the version table): the
// runtime's switching functions, its g's TLS slot (-8 from the fs base)
// and the g and m offsets goroutine dumps read. A C program has none.
func TestGoInfo(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the BPF walk is x86-64's")
	}
	dir := t.TempDir()
	src, _ := filepath.Abs("testdata/spin.go")
	build(t, dir, "go", "build", "-o", "spin", src)
	build(t, dir, "go", "build", "-ldflags=-s -w", "-o", "spin-stripped", src)
	for _, name := range []string{"spin", "spin-stripped"} {
		gf, ok := goInfo((&target.Objects{}).Module(filepath.Join(dir, name)))
		if !ok {
			t.Errorf("%s: no Go stack switch information", name)
			continue
		}
		if gf.MsLo == 0 || gf.MsHi <= gf.MsLo || gf.SsHi <= gf.SsLo || gf.SwHi <= gf.SwLo || gf.MsEntry != gf.MsLo ||
			gf.MsncEntry == 0 || gf.Mstart1 == 0 {
			t.Errorf("%s: functions %+v", name, gf)
		}
		if gf.TLSG != -8 || gf.GSchedSP == 0 || gf.GSchedPC == 0 || gf.GSchedBP == 0 || gf.GM == 0 || gf.MCurG == 0 || gf.GStackHi == 0 {
			t.Errorf("%s: TLS slot and offsets %+v", name, gf)
		}
	}
	if _, ok := goInfo((&target.Objects{}).Module("/bin/sh")); ok {
		t.Error("/bin/sh has Go stack switch information")
	}
}
