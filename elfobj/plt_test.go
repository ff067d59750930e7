package elfobj

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/internal/testutil/fuzzcorpus"
)

// TestPLTNamesMatchObjdump names every PLT entry of libc and of a program
// as objdump -d labels them ("realloc@plt", "*ABS*+0x9f550@plt").
func TestPLTNamesMatchObjdump(t *testing.T) {
	objdump, err := exec.LookPath("objdump")
	if err != nil {
		t.Skip("objdump (binutils) is not installed")
	}
	files := []string{fixture.Build(t, "plt", fixture.Variants[1])}
	for _, libc := range []string{"/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/aarch64-linux-gnu/libc.so.6"} {
		if _, err := exec.Command("test", "-e", libc).Output(); err == nil {
			files = append(files, libc)
			break
		}
	}
	label := regexp.MustCompile(`(?m)^([0-9a-f]+) <([^>]+@plt)>:$`)
	for _, path := range files {
		f, err := Open(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		defer f.Close()
		n := 0
		for _, sec := range []string{".plt", ".plt.sec"} {
			out, err := exec.Command(objdump, "-d", "-j", sec, path).Output()
			if err != nil {
				continue // no such section
			}
			for _, m := range label.FindAllSubmatch(out, -1) {
				addr, _ := strconv.ParseUint(string(m[1]), 16, 64)
				want := string(m[2])
				for _, probe := range []uint64{addr, addr + 15} {
					if got, ok := f.PLTName(probe); !ok || got != want {
						t.Errorf("%s %s %#x: %q %v, objdump says %q", path, sec, probe, got, ok, want)
					}
				}
				n++
			}
		}
		if n == 0 {
			t.Errorf("%s: objdump shows no PLT entries", path)
		}
		t.Logf("%s: %d PLT entries match objdump", path, n)
	}
}

// FuzzX86Slot decodes arbitrary PLT entry bytes.
func FuzzX86Slot(f *testing.F) {
	seeds := map[string][]byte{
		"plt":     {0xff, 0x25, 0xe2, 0x2f, 0, 0, 0x68, 1, 0, 0, 0, 0xe9, 0xe0, 0xff, 0xff, 0xff},
		"plt-sec": {0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, 0xad, 0x2f, 0, 0, 0x0f, 0x1f, 0x44, 0, 0},
	}
	for name, b := range seeds {
		if _, err := os.Stat("testdata/fuzz/FuzzX86Slot/" + name); err != nil {
			if err := fuzzcorpus.Write("testdata/fuzz/FuzzX86Slot", name, b, uint64(0x1020)); err != nil {
				f.Fatal(err)
			}
		}
		f.Add(b, uint64(0x1020))
	}
	f.Fuzz(func(t *testing.T, entry []byte, addr uint64) {
		slots := map[uint64]string{addr + 0x3008: "x@plt"}
		name := x86Slot(entry, addr, slots)
		if name != "" && name != "x@plt" {
			t.Fatalf("invented name %q", name)
		}
		tab := &pltTable{ranges: []pltRange{{start: addr, end: addr + 32, first: addr, size: 16, names: []string{name, ""}}}}
		tab.lookup(addr + uint64(len(entry)))
	})
}
