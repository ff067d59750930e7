package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/fixture"
)

// TestDumpFiberFlag: `rewind dump PID --fiber KIND@ADDR` prints each
// fiber under "Fibers of no known thread" with its heading, and --json a
// "fibers" list; a bad context is reported without failing the dump.
func TestDumpFiberFlag(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ not installed")
	}
	if _, err := os.Stat("/usr/include/boost/context/detail/fcontext.hpp"); err != nil {
		t.Skip("boost.context not installed (Debian: libboost-context-dev)")
	}
	exe := filepath.Join(t.TempDir(), "fibers")
	if out, err := exec.Command("g++", "-O1", "-g", "-o", exe, "../../fibers/testdata/fibers.cc", "-lboost_context").CombinedOutput(); err != nil {
		t.Fatalf("g++: %v\n%s", err, out)
	}
	p := fixture.Start(t, exe)
	args := []string{"dump", strconv.Itoa(p.PID)}
	for _, line := range strings.Split(p.Stderr(), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "fiber" {
			args = append(args, "--fiber", f[1]+"@"+f[2])
		}
	}
	args = append(args, "--fiber", "ucontext@0x10")
	out, errOut, code := run(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"Fibers of no known thread:", "fiber (ucontext, context 0x", "uc_park", "jb_park", "coro_park", "fc_park",
		"end: unreadable-context (ucontext at 0x10"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// --lazy stops the threads for the whole walk: the fibers are read
	// then, from the stopped process.
	out, errOut, code = run(t, append(args, "--lazy")...)
	if code != 0 || !strings.Contains(out, "fc_park") || !strings.Contains(out, "uc_park") {
		t.Errorf("--lazy: exit %d: %s\n%s", code, errOut, out)
	}
	out, errOut, code = run(t, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("--json: exit %d: %s", code, errOut)
	}
	var doc struct {
		Fibers []struct {
			Thread *int   `json:"thread"`
			Kind   string `json:"kind"`
			End    string `json:"end"`
			Frames []struct {
				Function string `json:"function"`
			} `json:"frames"`
		} `json:"fibers"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Fibers) != 5 || doc.Fibers[0].Kind != "ucontext" || doc.Fibers[4].End != "unreadable-context" ||
		len(doc.Fibers[3].Frames) == 0 || doc.Fibers[3].Frames[0].Function != "fc_park" {
		t.Errorf("JSON fibers: %+v", doc.Fibers)
	}
}
