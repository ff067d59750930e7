package clitest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
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
	if out, err := exec.Command("g++", "-O1", "-g", "-o", exe, "../../../fibers/testdata/fibers.cc", "-lboost_context").CombinedOutput(); err != nil {
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

// TestDumpFiberScan: `rewind dump PID --fiber-scan` lists the parked
// fibers of testdata/stale.cc and not the stale records it leaves in its
// fibers' live stacks (package fibers, Phantoms), live and from a
// core; with a 64 TB reservation in the process, --fiber-scan-time bounds
// the scan, one line on stderr says what was left, and the fiber in the
// small mappings is still listed.
func TestDumpFiberScan(t *testing.T) {
	for _, tool := range []string{"g++", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip(tool + " not installed")
		}
	}
	if _, err := os.Stat("/usr/include/boost/context/detail/fcontext.hpp"); err != nil {
		t.Skip("boost.context not installed (Debian: libboost-context-dev)")
	}
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale")
	if out, err := exec.Command("g++", "-O1", "-g", "-o", stale, "../../../fibers/testdata/stale.cc", "-lboost_context").CombinedOutput(); err != nil {
		t.Fatalf("g++: %v\n%s", err, out)
	}
	p := fixture.Start(t, stale)
	var want, phantoms []string
	for _, line := range strings.Split(p.Stderr(), "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			heading := "fiber (" + f[1] + ", context " + f[2] + ")"
			if f[0] == "fiber" {
				want = append(want, heading)
			} else if f[0] == "stale" {
				phantoms = append(phantoms, heading)
			}
		}
	}
	core := fixture.Gcore(t, p)
	for _, args := range [][]string{{"dump", strconv.Itoa(p.PID), "--fiber-scan"}, {"dump", "--core", core, "--fiber-scan"}} {
		out, errOut, code := run(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		for _, h := range want {
			if !strings.Contains(out, h) {
				t.Errorf("%v: output lacks %q", args, h)
			}
		}
		for _, h := range phantoms {
			if strings.Contains(out, h) {
				t.Errorf("%v: output lists the stale record %q", args, h)
			}
		}
		if n := strings.Count(out, "  fiber ("); n != len(want) {
			t.Errorf("%v: %d fibers listed, want %d:\n%s", args, n, len(want), out)
		}
	}

	huge := filepath.Join(dir, "huge")
	if out, err := exec.Command("gcc", "-O1", "-g", "-o", huge, "../../../fibers/testdata/huge_mappings.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	h := fixture.Start(t, huge, "anon")
	out, errOut, code := run(t, "dump", strconv.Itoa(h.PID), "--fiber-scan", "--fiber-scan-time", "300ms")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var notes []string
	for _, line := range strings.Split(errOut, "\n") {
		if strings.Contains(line, "--fiber-scan") {
			notes = append(notes, line)
		}
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "not scanned") || !strings.Contains(notes[0], "300ms") {
		t.Fatalf("stderr, want one line on what the scan left:\n%s", errOut)
	}
	// Unless the limit came before the small mappings were all read (a
	// loaded machine), the fiber in them is listed.
	f := strings.Fields(strings.TrimSpace(h.Stderr()))
	if strings.Contains(notes[0], " in 1 mapping ") && (len(f) != 3 || !strings.Contains(out, "fiber (ucontext, context "+f[2]+")")) {
		t.Errorf("the parked fiber (%q) is not listed:\n%s", h.Stderr(), out)
	}
}

// TestDumpFiberScanAdjacent: `rewind dump PID --fiber-scan` of a program
// whose 8 ucontext fibers' stacks are adjacent slices of one mmap, while
// the process's thread runs on one of them (../../fibers/testdata/
// adjacent_uc.c; package fibers' tests check its boost.context twin too):
// the output lists exactly the parked contexts the program reports, with
// the stacks in one mapping and with guard pages splitting them (the same
// contexts whatever the mappings), and none of its stale records; from a
// core too.
func TestDumpFiberScanAdjacent(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed")
	}
	exe := filepath.Join(t.TempDir(), "adjacent_uc")
	if out, err := exec.Command("gcc", "-O1", "-g", "-o", exe, "../../../fibers/testdata/adjacent_uc.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	for _, layout := range []string{"merged", "guard"} {
		t.Run(layout, func(t *testing.T) {
			p := fixture.Start(t, exe, layout)
			var want, phantoms []string
			for _, line := range strings.Split(p.Stderr(), "\n") {
				if f := strings.Fields(line); len(f) >= 3 {
					heading := "fiber (" + f[1] + ", context " + f[2] + ")"
					if f[0] == "fiber" {
						want = append(want, heading)
					} else if f[0] == "stale" {
						phantoms = append(phantoms, heading)
					}
				}
			}
			runs := [][]string{{"dump", strconv.Itoa(p.PID), "--fiber-scan"}}
			if layout == "merged" {
				runs = append(runs, []string{"dump", "--core", fixture.Gcore(t, p), "--fiber-scan"})
			}
			for _, args := range runs {
				out, errOut, code := run(t, args...)
				if code != 0 {
					t.Fatalf("%v: exit %d: %s", args, code, errOut)
				}
				for _, h := range want {
					if !strings.Contains(out, h) {
						t.Errorf("%v: output lacks %q", args, h)
					}
				}
				for _, h := range phantoms {
					if strings.Contains(out, h) {
						t.Errorf("%v: output lists the stale record %q", args, h)
					}
				}
				if n := strings.Count(out, "  fiber ("); n != len(want) || len(want) < 9 {
					t.Errorf("%v: %d fibers listed, want the %d parked:\n%s", args, n, len(want), out)
				}
			}
		})
	}
}
