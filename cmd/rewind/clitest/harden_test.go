package clitest

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/internal/testutil/perftest"
	"golang.org/x/sys/unix"
)

// TestProfileModeAndTitle: a profile is created under the umask (not
// 0644 whatever it is) and its title names the command, not its
// arguments, unless --title says otherwise.
func TestProfileModeAndTitle(t *testing.T) {
	old := unix.Umask(0o027)
	defer unix.Umask(old)
	dir := t.TempDir()
	out := filepath.Join(dir, "p.html")
	_, stderr, code := run(t, "record", "-q", "-o", out, "--", "sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done", "--password=hunter2")
	if code != 0 {
		if strings.Contains(stderr, "perf_event_open") || strings.Contains(stderr, "permission") {
			t.Skipf("cannot record here: %s", stderr)
		}
		t.Fatalf("record: rc %d\n%s", code, stderr)
	}
	fi, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("profile mode %#o under umask 027, want 0640", fi.Mode().Perm())
	}
	html, _ := os.ReadFile(out)
	if strings.Contains(string(html), "hunter2") || strings.Contains(string(html), "while [") {
		t.Errorf("the profile carries the command's arguments")
	}
	if !strings.Contains(string(html), "rewind record sh") {
		t.Errorf("the title does not name the command")
	}
	// (A command without samples writes no profile.)
	_, stderr, code = run(t, "record", "-q", "-F", "999", "--title", "my <run>", "-o", out, "--", "sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done")
	if code != 0 {
		t.Fatalf("record --title: rc %d\n%s", code, stderr)
	}
	html, _ = os.ReadFile(out)
	if !strings.Contains(string(html), "my &lt;run&gt;") {
		t.Errorf("--title is not the title")
	}
}

// TestDumpCacheTrust: an untrusted cache (another's, writable by others,
// or a symlinked subdirectory) is refused with a warning and the dump is
// still right; corrupt entries are rebuilt, and --stats says so.
func TestDumpCacheTrust(t *testing.T) {
	exe := fixture.Build(t, "recurse", fixture.Variants[3])
	p := fixture.Start(t, exe, "40")
	core := fixture.Gcore(t, p)
	cache := filepath.Join(t.TempDir(), "cache")
	t.Setenv("REWIND_CACHE_DIR", cache)
	fresh, errOut, code := run(t, "dump", "--no-cache", "--core", core)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	check := func(what, wantErr string) string {
		t.Helper()
		out, errOut, code := run(t, "dump", "--stats", "--core", core)
		if code != 0 || out != fresh {
			t.Fatalf("%s: exit %d, output differs:\n%s\n%s", what, code, out, errOut)
		}
		if !strings.Contains(errOut, wantErr) {
			t.Fatalf("%s: stderr lacks %q:\n%s", what, wantErr, errOut)
		}
		return errOut
	}
	check("cold", "rewind: ")
	// Corrupt every cached file: each is detected and rebuilt.
	files, _ := filepath.Glob(filepath.Join(cache, "*", "*", "*"))
	if len(files) == 0 {
		t.Fatal("nothing cached")
	}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		b[len(b)/2] ^= 0x40
		os.WriteFile(f, b, 0o600)
	}
	check("corrupt", "checksum mismatch: table rebuilt")
	// A symlinked subdirectory is not followed.
	victim := t.TempDir()
	os.RemoveAll(filepath.Join(cache, "tables"))
	os.Symlink(victim, filepath.Join(cache, "tables"))
	check("symlinked subdirectory", "is a symbolic link: refusing")
	if ents, _ := os.ReadDir(victim); len(ents) != 0 {
		t.Fatalf("wrote through the symlink: %v", ents)
	}
	os.Remove(filepath.Join(cache, "tables"))
	os.Chmod(cache, 0o777)
	errOut = check("world-writable", "writable by group or others")
	if !strings.Contains(errOut, "running without the cache") {
		t.Fatalf("no refusal of the root:\n%s", errOut)
	}
	os.Chmod(cache, 0o700)
	if os.Geteuid() == 0 {
		os.Chown(cache, 65534, 65534)
		check("another user's", "owned by uid 65534")
	}
}

// TestFIFOInputs: no command blocks on a FIFO named as its input; each
// refuses it at once, naming it.
func TestFIFOInputs(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "f")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"table", fifo},
		{"sframe", "dump", fifo},
		{"sframe", "gen", fifo, "-o", filepath.Join(dir, "out")},
		{"sframe", "gen", "--separate", fifo, "-o", filepath.Join(dir, "out")},
		{"dump", "--core", fifo},
		{"report", "-o", filepath.Join(dir, "out.folded"), fifo},
	} {
		done := make(chan struct{})
		var stderr string
		var code int
		go func() {
			defer close(done)
			_, stderr, code = run(t, args...)
		}()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("rewind %s blocked on a FIFO", strings.Join(args, " "))
		}
		if code == 0 || !strings.Contains(stderr, fifo) || !strings.Contains(stderr, "not a regular file (a FIFO)") {
			t.Errorf("rewind %s: rc %d, stderr %q", strings.Join(args, " "), code, stderr)
		}
	}
}

const escapeProgram = `#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>
volatile unsigned long sink;
__attribute__((noinline)) void spin(void) { for (unsigned long i = 0; i < 400000000UL; i++) sink += i; }
int main(int argc, char **argv) {
	prctl(PR_SET_NAME, "\x1b[2J\x1b]0;pw\x07", 0, 0, 0);
	if (argc > 1) { spin(); return 0; }
	printf("ready\n");
	fflush(stdout);
	pause();
	return 0;
}
`

// TestEscapesInOutput: a target whose thread name and executable path
// hold terminal escape sequences cannot get a control byte into rewind's
// text output (plain, grouped, folded) or warnings; they print as \x1b.
func TestEscapesInOutput(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "esc.c")
	os.WriteFile(src, []byte(escapeProgram), 0o600)
	exe := filepath.Join(dir, "prog\x1b]0;owned\x07\x1b[31m")
	if out, err := exec.Command("gcc", "-O1", "-o", exe, src).CombinedOutput(); err != nil {
		t.Skipf("gcc: %v\n%s", err, out)
	}
	cmd := exec.Command(exe)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("target: %q, %v", line, err)
	}
	clean := func(what, s string) {
		t.Helper()
		for _, c := range []byte(s) {
			if c < 0x20 && c != '\n' && c != '\t' || c == 0x7f {
				t.Fatalf("%s: raw control byte %#x in output:\n%q", what, c, s)
			}
		}
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	for _, args := range [][]string{{"dump", pid}, {"dump", "--group", pid}, {"dump", "--lazy", pid}} {
		out, errOut, code := run(t, args...)
		if code != 0 {
			t.Fatalf("%v: rc %d: %s", args, code, errOut)
		}
		clean(strings.Join(args, " "), out+errOut)
		if !strings.Contains(out, `\x1b[2J\x1b]0;pw\x07`) || !strings.Contains(out, `prog\x1b]0;owned\x07\x1b[31m`) {
			t.Errorf("%v: the escaped name or path is missing:\n%s", args, out)
		}
	}
	// JSON keeps the name exactly, encoded.
	out, errOut, code := run(t, "dump", "--json", pid)
	if code != 0 {
		t.Fatalf("dump --json: rc %d: %s", code, errOut)
	}
	clean("dump --json", out)
	if !strings.Contains(out, `\u001b[2J\u001b]0;pw\u0007`) {
		t.Errorf("dump --json: the thread name is not encoded as it is:\n%s", out)
	}
	folded := filepath.Join(dir, "p.folded")
	_, errOut, code = run(t, "record", "-q", "-o", folded, "--", exe, "spin")
	if code != 0 {
		t.Skipf("cannot record here: %s", errOut)
	}
	clean("record", errOut)
	b, _ := os.ReadFile(folded)
	clean("folded", string(b))
	if !strings.Contains(string(b), `\x1b`) {
		t.Errorf("folded output lacks the escaped names:\n%s", b)
	}
	html := filepath.Join(dir, "p.html")
	if _, errOut, code = run(t, "record", "-q", "-o", html, "--", exe, "spin"); code != 0 {
		t.Fatalf("record -o html: rc %d: %s", code, errOut)
	}
	b, _ = os.ReadFile(html)
	if bytes.IndexByte(b, 0x1b) >= 0 || bytes.IndexByte(b, 0x07) >= 0 {
		t.Errorf("the HTML flame graph holds raw control bytes")
	}
}

// TestParseErrorsLocated: malformed inputs give errors that name the file
// and the offset (and the header or section) in every command.
func TestParseErrorsLocated(t *testing.T) {
	full, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Skip("no /bin/true")
	}
	dir := t.TempDir()
	inputs := map[string][]byte{
		"short":   full[:40],
		"cut":     full[:3000],
		"garbage": []byte(strings.Repeat("garbage-", 16)),
	}
	for name, data := range inputs {
		p := filepath.Join(dir, name)
		os.WriteFile(p, data, 0o600)
		for _, args := range [][]string{
			{"table", p},
			{"sframe", "dump", p},
			{"sframe", "gen", p, "-o", filepath.Join(dir, "out")},
			{"dump", "--core", p},
			{"report", "-o", filepath.Join(dir, "out.folded"), p},
		} {
			_, stderr, code := run(t, args...)
			if code == 0 || !strings.Contains(stderr, p+": ") || !strings.Contains(stderr, "+0x") && !strings.Contains(stderr, "offset 0x") {
				t.Errorf("rewind %s: rc %d, error not located: %q", strings.Join(args, " "), code, stderr)
			}
		}
	}
}

// TestSFrameGenSparse: sframe gen on a 64 GiB sparse ELF fails with a
// clear error (or, with --separate, works) in bounded memory, also when a
// section claims tens of gigabytes the sparse file does hold.
func TestSFrameGenSparse(t *testing.T) {
	full, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Skip("no /bin/true")
	}
	ef, err := elf.NewFile(bytes.NewReader(full))
	if err != nil {
		t.Fatal(err)
	}
	eh := ef.Section(".eh_frame")
	if eh == nil || ef.Class != elf.ELFCLASS64 {
		t.Skip("/bin/true has no .eh_frame or is not ELF64")
	}
	idx := -1
	for i, s := range ef.Sections {
		if s == eh {
			idx = i
		}
	}
	shoff := binary.LittleEndian.Uint64(full[40:])
	dir := t.TempDir()
	const huge = 64 << 30
	write := func(name string, patch func(b []byte)) string {
		b := append([]byte(nil), full...)
		patch(b)
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, huge); err != nil {
			t.Skipf("cannot make a sparse file here: %v", err)
		}
		return p
	}
	plain := write("plain", func([]byte) {})
	bigSection := write("bigsec", func(b []byte) {
		h := b[shoff+uint64(idx)*64:]
		binary.LittleEndian.PutUint64(h[24:], 1<<30)  // sh_offset: in the hole
		binary.LittleEndian.PutUint64(h[32:], 60<<30) // sh_size: 60 GiB
	})
	maxRSS := func(args ...string) (string, int64, int) {
		stderr, code, rss := runPeakRSS(t, rewindBin, args...)
		return stderr, rss >> 10, code
	}
	out := filepath.Join(dir, "out")
	for _, c := range []struct {
		args []string
		ok   bool
		want string
	}{
		{[]string{"sframe", "gen", plain, "-o", out}, false, "rewind copies files of at most"},
		{[]string{"sframe", "gen", "--separate", plain, "-o", out}, true, ""},
		{[]string{"sframe", "gen", bigSection, "-o", out}, false, "too large to read"},
		{[]string{"sframe", "gen", "--separate", bigSection, "-o", out}, false, "too large to read"},
	} {
		stderr, rss, code := maxRSS(c.args...)
		if (code == 0) != c.ok || !strings.Contains(stderr, c.want) {
			t.Errorf("rewind %s: rc %d, stderr %q (want %q)", strings.Join(c.args, " "), code, stderr, c.want)
		}
		if rss > 512<<10 { // KiB
			t.Errorf("rewind %s: max RSS %d MiB", strings.Join(c.args, " "), rss>>10)
		}
		t.Logf("rewind %s: rc %d, max RSS %d MiB", strings.Join(c.args[:len(c.args)-3], " "), code, rss>>10)
	}
}

// TestSFrameGenOutputMode: the copy sframe gen writes keeps the input's
// permissions within the umask (0755 under umask 027 gives 0750).
func TestSFrameGenOutputMode(t *testing.T) {
	in := filepath.Join(t.TempDir(), "true")
	b, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Skip("no /bin/true")
	}
	os.WriteFile(in, b, 0o755)
	os.Chmod(in, 0o755)
	old := unix.Umask(0o027)
	defer unix.Umask(old)
	out := in + ".sframe"
	if _, stderr, code := run(t, "sframe", "gen", "-q", in, "-o", out); code != 0 {
		t.Fatalf("sframe gen: rc %d: %s", code, stderr)
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o750 {
		t.Fatalf("output mode %v, %v; want 0750", fi.Mode(), err)
	}
}

// TestReportMMAPNamesFIFO: a perf.data whose MMAP records name a path that
// is now a FIFO (the program was replaced after the recording) is
// reported without waiting on the FIFO.
func TestReportMMAPNamesFIFO(t *testing.T) {
	perf := perftest.RequirePerf(t)
	built := perftest.BuildCPU(t, "-fomit-frame-pointer")
	dir := t.TempDir()
	exe := filepath.Join(dir, "cpu")
	b, err := os.ReadFile(built)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(exe, b, 0o700)
	data := filepath.Join(dir, "perf.data")
	if out, err := exec.Command(perf, "record", "-q", "-e", "cpu-clock", "-F", "499", "--call-graph", "dwarf,4096",
		"-o", data, "--", exe, "0.3", "1").CombinedOutput(); err != nil {
		t.Skipf("perf record cannot run here: %v\n%s", err, out)
	}
	os.Remove(exe)
	if err := unix.Mkfifo(exe, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var stderr string
	var code int
	go func() {
		defer close(done)
		_, stderr, code = run(t, "report", "-q", "-o", filepath.Join(dir, "out.folded"), data)
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("rewind report blocked on a FIFO named by an MMAP record")
	}
	if code != 0 || !strings.Contains(stderr, exe) || !strings.Contains(stderr, "not a regular file (a FIFO)") {
		t.Errorf("report: rc %d, stderr:\n%s", code, stderr)
	}
}
