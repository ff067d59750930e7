package profiles

import (
	"os/exec"
	"regexp"
	"strconv"
	"testing"

	"github.com/rewindstack/rewind/internal/perftest"
)

// TestPLTNamesMatchObjdump names every PLT entry of libc and of a program
// as objdump -d labels them ("realloc@plt", "*ABS*+0x9f550@plt").
func TestPLTNamesMatchObjdump(t *testing.T) {
	objdump, err := exec.LookPath("objdump")
	if err != nil {
		t.Skip("objdump (binutils) is not installed")
	}
	files := []string{perftest.BuildCPU(t, "-fomit-frame-pointer")}
	for _, libc := range []string{"/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/aarch64-linux-gnu/libc.so.6"} {
		if _, err := exec.Command("test", "-e", libc).Output(); err == nil {
			files = append(files, libc)
			break
		}
	}
	label := regexp.MustCompile(`(?m)^([0-9a-f]+) <([^>]+@plt)>:$`)
	for _, path := range files {
		tab, err := readPLT(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
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
					if got, ok := tab.lookup(probe); !ok || got != want {
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
