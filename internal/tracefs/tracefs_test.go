package tracefs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFromMountinfo: a tracefs mount is found wherever it is mounted
// (escaped names too); debugfs counts only with a tracing directory that
// holds tracefs; mounts of a subdirectory do not count.
func TestFromMountinfo(t *testing.T) {
	dir := t.TempDir()
	write := func(text string) string {
		p := filepath.Join(dir, "mountinfo")
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct{ name, text, want string }{
		{"canonical", "22 1 0:21 / /sys rw,nosuid - sysfs sysfs rw\n" +
			"61 22 0:13 / /sys/kernel/tracing rw,relatime shared:5 - tracefs nodev rw\n", "/sys/kernel/tracing"},
		{"elsewhere-escaped", "70 1 0:13 / /host/my\\040tracing rw - tracefs tracefs rw\n", "/host/my tracing"},
		{"subdirectory", "70 1 0:13 /events /weird rw - tracefs tracefs rw\n", ""},
		{"debugfs-without-tracing", "70 1 0:7 / " + dir + " rw - debugfs debugfs rw\n", ""},
		{"none", "22 1 0:21 / /sys rw,nosuid - sysfs sysfs rw\n", ""},
		{"malformed", "garbage\n\n1 2 3\n", ""},
	} {
		if got := fromMountinfo(write(c.text)); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	if got := fromMountinfo(filepath.Join(dir, "missing")); got != "" {
		t.Errorf("missing file: %q", got)
	}
}

// TestFoldNotes: the BPF unwinder's notes of missing tracepoints become
// one line naming them all; other notes stay as they are.
func TestFoldNotes(t *testing.T) {
	in := map[string]int{
		"unmapping is not followed: no syscalls:sys_exit_mmap tracepoint":    1,
		"unmapping is not followed: no mmap:vm_unmapped_area tracepoint":     1,
		"unmapping is not followed: no syscalls:sys_enter_munmap tracepoint": 1,
		"3 files did not fit": 2,
	}
	out := FoldNotes(in)
	if len(out) != 2 || out["3 files did not fit"] != 2 {
		t.Fatalf("%v", out)
	}
	for s, n := range out {
		if s == "3 files did not fit" {
			continue
		}
		if n != 1 || !strings.HasPrefix(s, "unmapping is not followed") || strings.Count(s, "unmapping") != 1 {
			t.Errorf("folded note %q (%d)", s, n)
		}
		if _, err := Root(); err == nil && !strings.Contains(s, "mmap:vm_unmapped_area, syscalls:sys_enter_munmap, syscalls:sys_exit_mmap") {
			t.Errorf("folded note %q does not list the tracepoints", s)
		}
		if _, err := Root(); err != nil && !strings.Contains(s, MountCommand) {
			t.Errorf("folded note %q does not say how to mount tracefs", s)
		}
	}
	if out := FoldNotes(map[string]int{"x": 1}); len(out) != 1 || out["x"] != 1 {
		t.Errorf("without tracepoint notes: %v", out)
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{`a\040b`: "a b", `\134x`: `\x`, `plain`: "plain", `odd\04`: `odd\04`} {
		if got := unescape(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}
