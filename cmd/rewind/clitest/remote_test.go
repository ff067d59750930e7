package clitest

import (
	"bytes"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/internal/testutil/perftest"
	"github.com/rewindstack/rewind/output"
)

// runIn runs rewind in dir with extra environment variables.
func runIn(t *testing.T, dir string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(rewindBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// isolatedEnv keeps the user's perf build-id cache and debuginfod
// settings out of a test.
func isolatedEnv(t *testing.T) []string {
	home := t.TempDir()
	return []string{"HOME=" + home, "PERF_BUILDID_DIR=" + filepath.Join(home, "perf"),
		"DEBUGINFOD_URLS=", "DEBUGINFOD_CACHE_PATH=" + filepath.Join(home, "dcache")}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestDumpCoreMovedExe: an executable moved and renamed after the dump is
// found through a relative --exe, a directory --exe, and a mismatched one
// is refused with one warning.
func TestDumpCoreMovedExe(t *testing.T) {
	exe := fixture.Build(t, "threads", fixture.Variants[3])
	runDir := t.TempDir()
	prog := filepath.Join(runDir, "prog")
	copyFile(t, exe, prog)
	p := fixture.Start(t, prog)
	core := fixture.Gcore(t, p)
	moved := t.TempDir()
	if err := os.Rename(prog, filepath.Join(moved, "renamed")); err != nil {
		t.Fatal(err)
	}
	env := isolatedEnv(t)

	_, errOut, _ := runIn(t, moved, env, "dump", "--core", core)
	if !strings.Contains(errOut, prog) {
		t.Errorf("no warning names the missing executable %s:\n%s", prog, errOut)
	}
	for _, exeArg := range []string{"./renamed", ".", "renamed"} {
		out, errOut, code := runIn(t, moved, env, "dump", "--core", core, "--exe", exeArg)
		if code != 0 || errOut != "" {
			t.Errorf("--exe %s: exit %d, stderr:\n%s", exeArg, code, errOut)
		}
		for _, want := range []string{"block_condwait", "t16_start", "start_thread"} {
			if !strings.Contains(out, want) {
				t.Errorf("--exe %s: output lacks %q:\n%s", exeArg, want, out)
			}
		}
		if strings.Contains(out, "?? (prog)") {
			t.Errorf("--exe %s: unsymbolized frames in the executable:\n%s", exeArg, out)
		}
	}

	// Another program under the executable's name: refused, once.
	other := t.TempDir()
	copyFile(t, fixture.Build(t, "recurse", fixture.Variants[3]), filepath.Join(other, "prog"))
	out, errOut, code := runIn(t, other, env, "dump", "--core", core, "--exe", "prog")
	if code != 0 {
		t.Errorf("mismatched --exe: exit %d: %s", code, errOut)
	}
	if n := strings.Count(errOut, "has build-id"); n != 1 || !strings.Contains(errOut, "not used for unwinding") {
		t.Errorf("mismatched --exe: want one build-id warning, got %d:\n%s", n, errOut)
	}
	if strings.Contains(out, "t16_start") {
		t.Errorf("mismatched --exe was used for symbols:\n%s", out)
	}
	_, errOut, _ = runIn(t, other, env, "dump", "--core", core, "--exe", "prog", "--force")
	if n := strings.Count(errOut, "has build-id"); n != 1 || !strings.Contains(errOut, "used anyway") {
		t.Errorf("--force: want one build-id warning saying it is used, got:\n%s", errOut)
	}
}

// TestDumpCoreSysroot: mapped paths are looked up under --sysroot first.
func TestDumpCoreSysroot(t *testing.T) {
	exe := fixture.Build(t, "threads", fixture.Variants[3])
	runDir := t.TempDir()
	prog := filepath.Join(runDir, "prog")
	copyFile(t, exe, prog)
	p := fixture.Start(t, prog)
	core := fixture.Gcore(t, p)
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, runDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(prog, filepath.Join(root, prog)); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runIn(t, "", isolatedEnv(t), "dump", "--core", core, "--sysroot", root)
	if code != 0 || errOut != "" || !strings.Contains(out, "t16_start") {
		t.Errorf("--sysroot: exit %d, stderr %s\n%s", code, errOut, out)
	}
}

// remoteCore makes a kernel core of the threads fixture run through a
// private copy of the dynamic loader and libc, then moves all three into
// a directory to serve: every file the core names is then absent.
func remoteCore(t *testing.T) (core, served string, ids []string) {
	exe := fixture.Build(t, "threads", fixture.Variants[3])
	ldso, err := filepath.EvalSymlinks("/lib64/ld-linux-x86-64.so.2")
	if err != nil {
		t.Skipf("no x86-64 dynamic loader: %v", err)
	}
	libc, err := filepath.EvalSymlinks("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		t.Skipf("no x86-64 libc: %v", err)
	}
	runDir := t.TempDir()
	for from, to := range map[string]string{exe: "prog", ldso: "ld.so", libc: "libc.so.6"} {
		copyFile(t, from, filepath.Join(runDir, to))
	}
	core = fixture.KernelCore(t, filepath.Join(runDir, "ld.so"), "--library-path", runDir, filepath.Join(runDir, "prog"))
	// The core may have been written into runDir: keep it.
	keep := filepath.Join(t.TempDir(), "core")
	if err := os.Rename(core, keep); err != nil {
		t.Fatal(err)
	}
	served = t.TempDir()
	for _, n := range []string{"prog", "ld.so", "libc.so.6"} {
		if err := os.Rename(filepath.Join(runDir, n), filepath.Join(served, n)); err != nil {
			t.Fatal(err)
		}
		f, err := elfobj.Open(filepath.Join(served, n))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, f.BuildIDHex())
		f.Close()
	}
	return keep, served, ids
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startDebuginfod runs `debuginfod -F DIR -p PORT` on loopback and waits
// until it serves every build-id in ids.
func startDebuginfod(t *testing.T, dir string, ids []string) string {
	if _, err := exec.LookPath("debuginfod"); err != nil {
		t.Skip("debuginfod is not installed (Debian package debuginfod)")
	}
	port := freePort(t)
	cmd := exec.Command("debuginfod", "-F", dir, "-p", strconv.Itoa(port), "-d", filepath.Join(t.TempDir(), "db.sqlite"))
	var logBuf strings.Builder
	cmd.Stdout, cmd.Stderr = &logBuf, &logBuf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(60 * time.Second)
	for _, id := range ids {
		for {
			resp, err := http.Get(url + "/buildid/" + id + "/executable")
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("debuginfod did not serve %s within 60s:\n%s", id, logBuf.String())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return url
}

// TestDumpCoreDebuginfod: a core whose executable and libraries are gone
// is dumped with every frame symbolized through a debuginfod server, as
// eu-stack does with the same DEBUGINFOD_URLS; the downloads land in
// elfutils' cache layout.
func TestDumpCoreDebuginfod(t *testing.T) {
	core, served, ids := remoteCore(t)
	url := startDebuginfod(t, served, ids)
	env := isolatedEnv(t)
	cache := t.TempDir()
	env = append(env, "DEBUGINFOD_URLS="+url, "DEBUGINFOD_CACHE_PATH="+cache)

	// Offline: the network is not touched, the files stay missing.
	out, errOut, _ := runIn(t, "", env, "dump", "--core", core, "--offline")
	if !strings.Contains(out, "??") || !strings.Contains(errOut, "prog") {
		t.Errorf("--offline symbolized without the files, or said nothing:\n%s\n%s", out, errOut)
	}
	if _, err := os.Stat(filepath.Join(cache, ids[0], "executable")); err == nil {
		t.Errorf("--offline downloaded the executable")
	}

	out, errOut, code := runIn(t, "", env, "dump", "--core", core, "--json", "--no-inlines")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep output.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("JSON: %v\n%s", err, out)
	}
	for _, id := range ids[:1] {
		if _, err := os.Stat(filepath.Join(cache, id, "executable")); err != nil {
			t.Errorf("not in elfutils' cache layout: %v", err)
		}
	}
	for _, th := range rep.Threads {
		for i, f := range th.Frames {
			if f.Function == "" {
				t.Errorf("thread %d frame #%d %#x (%s) unsymbolized", th.TID, i, f.PC, f.Module)
			}
		}
	}
	if !strings.Contains(out, "t16_start") {
		t.Errorf("fixture functions missing:\n%s", out)
	}

	// eu-stack with the same servers (and its own cache) names the same
	// functions at the same PCs.
	euCmd := exec.Command("eu-stack", "-m", "-a", "-n", "0", "--core", core)
	euCmd.Env = append(os.Environ(), "DEBUGINFOD_URLS="+url, "DEBUGINFOD_CACHE_PATH="+t.TempDir())
	var so, se strings.Builder
	euCmd.Stdout, euCmd.Stderr = &so, &se
	if err := euCmd.Run(); err != nil && euCmd.ProcessState == nil {
		t.Fatalf("eu-stack: %v", err)
	}
	eu, _ := fixture.ParseEuStack([]byte(so.String()), []byte(se.String()))
	if len(eu) == 0 {
		t.Fatalf("eu-stack printed no threads:\n%s\n%s", so.String(), se.String())
	}
	compared := 0
	for _, es := range eu {
		var th *output.Thread
		for i := range rep.Threads {
			if rep.Threads[i].TID == es.TID {
				th = &rep.Threads[i]
			}
		}
		if th == nil {
			t.Errorf("thread %d: eu-stack has it, rewind does not", es.TID)
			continue
		}
		byPC := map[uint64]output.Frame{}
		for _, f := range th.Frames {
			byPC[f.PC] = f
		}
		for _, ef := range es.Frames {
			if ef.Func == "" {
				continue
			}
			got, ok := byPC[ef.PC]
			if !ok {
				t.Errorf("thread %d: eu-stack frame %#x %s not in rewind's stack", es.TID, ef.PC, ef.Func)
				continue
			}
			// eu-stack prefers a global name, rewind perf's choice among
			// the names of one address (pthread_mutex_lock where
			// eu-stack says __pthread_mutex_lock@GLIBC_2.2.5).
			if fixture.BaseName(got.Function) != fixture.BaseName(ef.Func) && !aliases(t, filepath.Join(served, filepath.Base(got.Module)), got.Function, ef.Func) {
				t.Errorf("thread %d %#x: rewind %q (in %s), eu-stack %q", es.TID, ef.PC, got.Function, got.Module, ef.Func)
			}
			compared++
		}
	}
	if compared < 10 {
		t.Errorf("only %d frames compared with eu-stack", compared)
	}
}

// aliases reports whether functions a and b (with or without symbol
// versions) start at one address in the symbol table of module or of its
// separate debug file in /usr/lib/debug.
func aliases(t *testing.T, module, a, b string) bool {
	t.Helper()
	f, err := elfobj.Open(module)
	if err != nil {
		return false
	}
	defer f.Close()
	files := []*elfobj.File{f}
	if id := hex.EncodeToString(f.BuildID); len(id) > 2 {
		if d, err := elfobj.Open("/usr/lib/debug/.build-id/" + id[:2] + "/" + id[2:] + ".debug"); err == nil {
			defer d.Close()
			files = append(files, d)
		}
	}
	na, nb := fixture.BaseName(a), fixture.BaseName(b)
	for _, f := range files {
		ext, err := f.FunctionExtents([]string{na, nb})
		if err == nil && len(ext) == 2 && ext[na].Start == ext[nb].Start {
			return true
		}
	}
	return false
}

// TestDumpCoreDebuginfodDown: a server that is down or never answers
// costs at most the timeout, warns once, and leaves frames as addresses.
func TestDumpCoreDebuginfodDown(t *testing.T) {
	core, _, _ := remoteCore(t)
	// A server that accepts connections and never answers.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	slow := "http://" + l.Addr().String()
	down := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	for _, url := range []string{slow, down} {
		env := append(isolatedEnv(t), "DEBUGINFOD_URLS="+url, "DEBUGINFOD_CACHE_PATH="+t.TempDir(), "DEBUGINFOD_TIMEOUT=2")
		start := time.Now()
		out, errOut, code := runIn(t, "", env, "dump", "--core", core)
		d := time.Since(start)
		t.Logf("%s: %v", url, d)
		if code != 0 {
			t.Errorf("%s: exit %d: %s", url, code, errOut)
		}
		// The timeout is 2 s: waiting twice for it would be a bug; the
		// rest is margin for a loaded machine.
		if d > 4*time.Second+3*time.Second {
			t.Errorf("%s: dump took %v with DEBUGINFOD_TIMEOUT=2", url, d)
		}
		if n := strings.Count(errOut, "debuginfod server"); n != 1 {
			t.Errorf("%s: want one warning about the server, got %d:\n%s", url, n, errOut)
		}
		if !strings.Contains(out, "??") {
			t.Errorf("%s: frames symbolized without the files:\n%s", url, out)
		}
	}
}

// TestDumpTruncatedKernelCore: a kernel core cut short is dumped as far
// as it goes, says once that it is truncated (with both sizes), and exits
// with status 1.
func TestDumpTruncatedKernelCore(t *testing.T) {
	exe := fixture.Build(t, "threads", fixture.Variants[3])
	core := fixture.KernelCore(t, exe)
	b, err := os.ReadFile(core)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(t.TempDir(), "core")
	if err := os.WriteFile(cut, b[:len(b)*2/3], 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runIn(t, "", isolatedEnv(t), "dump", "--core", cut)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	want := fmt.Sprintf("is truncated: %d bytes, its segments need %d", len(b)*2/3, len(b))
	if strings.Count(errOut, "is truncated") != 1 || !strings.Contains(errOut, want) {
		t.Errorf("want one %q, stderr:\n%s", want, errOut)
	}
	if !strings.Contains(out, "TID ") || strings.Contains(out, "not dumped in the core") {
		t.Errorf("output:\n%s", out)
	}
}

// TestDumpGcoreNotesCut: a gcore core cut short inside its notes (gcore
// writes them last) still gives the threads whose registers it holds, and
// says where the notes end and what is lost.
func TestDumpGcoreNotesCut(t *testing.T) {
	exe := fixture.Build(t, "threads", fixture.Variants[3])
	core := fixture.Gcore(t, fixture.Start(t, exe))
	b, err := os.ReadFile(core)
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var notes *elf.Prog
	for _, p := range ef.Progs {
		if p.Type == elf.PT_NOTE {
			notes = p
		}
	}
	if notes == nil || notes.Off+notes.Filesz > uint64(len(b)) {
		t.Fatalf("no PT_NOTE in %s", core)
	}
	// Cut two thirds into the notes: past the first thread's registers,
	// before NT_AUXV and NT_FILE, which gcore writes after the threads.
	at := notes.Off + notes.Filesz*2/3
	cut := filepath.Join(t.TempDir(), "core")
	if err := os.WriteFile(cut, b[:at], 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runIn(t, "", isolatedEnv(t), "dump", "--core", cut)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if !strings.Contains(errOut, "its notes are cut at file offset") || !strings.Contains(errOut, "threads' registers read") ||
		!strings.Contains(errOut, "NT_FILE") || !strings.Contains(errOut, "give the program and its libraries with --exe") {
		t.Errorf("stderr does not say what is missing:\n%s", errOut)
	}
	if !strings.Contains(out, "TID ") {
		t.Errorf("no thread dumped:\n%s", out)
	}
	// With the file mappings lost, the program and libc given with --exe
	// are placed by the build-ids of the ELF headers the core holds: the
	// threads unwind by CFI through both, named.
	libc, err := filepath.EvalSymlinks("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		t.Skipf("no x86-64 libc here: %v", err)
	}
	out, errOut, code = runIn(t, "", isolatedEnv(t), "dump", "--core", cut, "--exe", exe, "--exe", libc)
	if code != 1 || strings.Contains(errOut, "fit it") {
		t.Errorf("exit %d, want 1, and no doubt about the program:\n%s", code, errOut)
	}
	if !strings.Contains(out, "(libc.so.6)") || !strings.Contains(out, "(threads)") || !strings.Contains(out, "[dwarf]") {
		t.Errorf("frames in the program and libc not unwound and named:\n%s\n%s", out, errOut)
	}
}

// TestReportMovedExe: a perf.data file whose executable was moved away
// is reported with the executable found through --exe (matched by the
// recorded build-id), and through --sysroot.
func TestReportMovedExe(t *testing.T) {
	perf := perftest.RequirePerf(t)
	built := perftest.BuildCPU(t, "-fomit-frame-pointer")
	dir := t.TempDir()
	exe := filepath.Join(dir, "cpu")
	copyFile(t, built, exe)
	data := filepath.Join(dir, "perf.data")
	if out, err := exec.Command(perf, "record", "-q", "--no-buildid-cache", "-e", "cpu-clock", "-F", "499", "--call-graph", "dwarf,4096",
		"-o", data, "--", exe, "0.5", "1").CombinedOutput(); err != nil {
		t.Skipf("perf record cannot run here: %v\n%s", err, out)
	}
	elsewhere := t.TempDir()
	if err := os.Rename(exe, filepath.Join(elsewhere, "renamed")); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, filepath.Join(elsewhere, "renamed"), filepath.Join(root, exe))
	env := isolatedEnv(t)
	folded := filepath.Join(t.TempDir(), "out.folded")
	report := func(extra ...string) string {
		t.Helper()
		args := append([]string{"report", "-q", "--fidelity=false", "-o", folded}, extra...)
		_, errOut, code := runIn(t, elsewhere, env, append(args, data)...)
		if code != 0 {
			t.Fatalf("report %q: exit %d: %s", extra, code, errOut)
		}
		b, err := os.ReadFile(folded)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if out := report(); strings.Contains(out, "level2") {
		t.Fatalf("symbolized without the executable: the test proves nothing")
	}
	// The missing executable is said, once.
	if _, errOut, _ := runIn(t, elsewhere, env, "report", "-q", "-o", folded, data); strings.Count(errOut, exe) != 1 || !strings.Contains(errOut, "no such file") {
		t.Errorf("report without the executable: want one warning naming %s, stderr:\n%s", exe, errOut)
	}
	for _, extra := range [][]string{{"--exe", "."}, {"--exe", "renamed"}, {"--sysroot", root}} {
		if out := report(extra...); !strings.Contains(out, "level2") {
			t.Errorf("report %q: fixture functions missing:\n%.2000s", extra, out)
		}
	}
}

// TestDumpStaticKernelCoreMovedExe: the kernel core of a static program
// whose executable was renamed is dumped through a relative --exe.
func TestDumpStaticKernelCoreMovedExe(t *testing.T) {
	exe := fixture.Build(t, "threads", fixture.Variant{Name: "O2-static", Flags: []string{"-O2", "-static"}})
	runDir := t.TempDir()
	prog := filepath.Join(runDir, "prog")
	copyFile(t, exe, prog)
	core := fixture.KernelCore(t, prog)
	keep := filepath.Join(t.TempDir(), "core")
	if err := os.Rename(core, keep); err != nil {
		t.Fatal(err)
	}
	moved := t.TempDir()
	if err := os.Rename(prog, filepath.Join(moved, "renamed")); err != nil {
		t.Fatal(err)
	}
	env := isolatedEnv(t)
	out, errOut, _ := runIn(t, moved, env, "dump", "--core", keep)
	if strings.Count(errOut, prog) != 1 || strings.Contains(out, "t16_start") {
		t.Errorf("without --exe: want one warning naming %s, stderr:\n%s\nstdout:\n%.1500s", prog, errOut, out)
	}
	out, errOut, code := runIn(t, moved, env, "dump", "--core", keep, "--exe", "./renamed")
	if code != 0 || errOut != "" {
		t.Errorf("exit %d, stderr:\n%s", code, errOut)
	}
	for _, want := range []string{"block_condwait", "t16_start", "start_thread"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "?? (prog)") {
		t.Errorf("unsymbolized frames:\n%s", out)
	}
}

// TestDumpCoreDebugDir: a stripped executable's separate debug file is
// found under --debug-dir in the .build-id layout, giving its static
// functions and file:line.
func TestDumpCoreDebugDir(t *testing.T) {
	exe := fixture.Build(t, "threads", fixture.Variants[3])
	runDir := t.TempDir()
	prog := filepath.Join(runDir, "prog")
	copyFile(t, exe, prog)
	f, err := elfobj.Open(prog)
	if err != nil {
		t.Fatal(err)
	}
	id := f.BuildIDHex()
	f.Close()
	if len(id) < 3 {
		t.Fatalf("fixture has no build-id")
	}
	debugDir := t.TempDir()
	dbg := filepath.Join(debugDir, ".build-id", id[:2], id[2:]+".debug")
	if err := os.MkdirAll(filepath.Dir(dbg), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"objcopy", "--only-keep-debug", prog, dbg}, {"strip", prog}} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	p := fixture.Start(t, prog)
	core := fixture.Gcore(t, p)
	env := isolatedEnv(t)
	if out, _, _ := runIn(t, "", env, "dump", "--core", core); strings.Contains(out, "t16_start") {
		t.Fatalf("the stripped executable is symbolized without its debug file: the test proves nothing\n%s", out)
	}
	out, errOut, code := runIn(t, "", env, "dump", "--core", core, "--debug-dir", debugDir)
	if code != 0 || !strings.Contains(out, "t16_start") || !strings.Contains(out, "threads.c:") {
		t.Errorf("--debug-dir: exit %d, stderr %s\n%s", code, errOut, out)
	}
}

// TestReportPerfBuildIDDir: perf's build-id cache named by
// $PERF_BUILDID_DIR alone (no ~/.debug) supplies a deleted executable.
func TestReportPerfBuildIDDir(t *testing.T) {
	perf := perftest.RequirePerf(t)
	built := perftest.BuildCPU(t, "-fomit-frame-pointer")
	dir := t.TempDir()
	exe := filepath.Join(dir, "cpu")
	copyFile(t, built, exe)
	// perf record fills $HOME/.debug; the cache is then moved where
	// only $PERF_BUILDID_DIR names it.
	home := t.TempDir()
	data := filepath.Join(dir, "perf.data")
	rec := exec.Command(perf, "record", "-q", "-e", "cpu-clock", "-F", "499", "--call-graph", "dwarf,4096",
		"-o", data, "--", exe, "0.5", "1")
	rec.Env = append(os.Environ(), "HOME="+home)
	if out, err := rec.CombinedOutput(); err != nil {
		t.Skipf("perf record cannot run here: %v\n%s", err, out)
	}
	os.Remove(exe)
	cache := filepath.Join(t.TempDir(), "buildid")
	if err := os.Rename(filepath.Join(home, ".debug"), cache); err != nil {
		t.Skipf("perf record kept no build-id cache: %v", err)
	}
	env := append(isolatedEnv(t), "PERF_BUILDID_DIR="+cache)
	folded := filepath.Join(t.TempDir(), "out.folded")
	_, errOut, code := runIn(t, "", env, "report", "-q", "--fidelity=false", "-o", folded, data)
	b, _ := os.ReadFile(folded)
	if code != 0 || !strings.Contains(string(b), "level2") {
		t.Errorf("report with the executable only in $PERF_BUILDID_DIR: exit %d, stderr %s\n%.2000s", code, errOut, b)
	}
	noCache := append(slices.Clone(env), "PERF_BUILDID_DIR="+t.TempDir())
	_, _, _ = runIn(t, "", noCache, "report", "-q", "--fidelity=false", "-o", folded, data)
	if b, _ := os.ReadFile(folded); strings.Contains(string(b), "level2") {
		t.Errorf("symbolized without the build-id cache: the test proves nothing")
	}
}

const qemuProg = `#include <stdlib.h>
__attribute__((noinline)) void qleaf(int n) { if (n == 0) abort(); qleaf(n - 1); __asm__ volatile(""); }
int main(void) { qleaf(3); return 0; }
`

// qemuOther is another program: its larger main moves its entry point.
const qemuOther = `#include <stdlib.h>
#include <stdio.h>
int main(int argc, char **argv) { for (int i = 0; i < argc; i++) printf("%d %s %ld\n", i, argv[i], strtol(argv[i], 0, 0)); abort(); }
`

// TestDumpQemuCoreExe: qemu-user's core of a static aarch64 program names
// no mapped file, so nothing says which executable it ran. Without --exe
// the dump says so; among several --exe files and directories the one
// that fits the core is used (not the first given); a file that does not
// fit is refused with a warning saying why (issue 19 item 1).
func TestDumpQemuCoreExe(t *testing.T) {
	exe, core, _ := fixture.QemuARM64Core(t, qemuProg, "-O2")
	other, _, _ := fixture.QemuARM64Core(t, qemuOther, "-O2")
	moved := t.TempDir()
	copyFile(t, exe, filepath.Join(moved, "renamed"))
	env := isolatedEnv(t)

	out, errOut, _ := runIn(t, moved, env, "dump", "--core", core)
	if !strings.Contains(errOut, "--exe") || strings.Contains(out, "qleaf") {
		t.Errorf("without --exe: want a warning that says to give --exe, stderr:\n%s\nstdout:\n%s", errOut, out)
	}
	for _, args := range [][]string{{"--exe", other, "--exe", "./renamed"}, {"--exe", other, "--exe", "."}} {
		out, errOut, code := runIn(t, moved, env, append([]string{"dump", "--core", core}, args...)...)
		if code != 0 || errOut != "" {
			t.Errorf("%v: exit %d, stderr:\n%s", args, code, errOut)
		}
		if !strings.Contains(out, "qleaf+") || !strings.Contains(out, "(renamed)") || !strings.Contains(out, "_start") {
			t.Errorf("%v: not symbolized with the executable that fits:\n%s", args, out)
		}
	}
	out, errOut, _ = runIn(t, moved, env, "dump", "--core", core, "--exe", other)
	if strings.Count(errOut, "rewind: warning:") != 1 || !strings.Contains(errOut, "entry point") || strings.Contains(out, "qleaf") {
		t.Errorf("a file that does not fit: want one warning about its entry point and no symbols, stderr:\n%s\nstdout:\n%s", errOut, out)
	}
	// Two files that fit: one is used, and the dump says the choice was
	// not certain.
	copyFile(t, exe, filepath.Join(moved, "copy"))
	out, errOut, _ = runIn(t, moved, env, "dump", "--core", core, "--exe", "./renamed", "--exe", "./copy")
	if strings.Count(errOut, "rewind: warning:") != 1 || !strings.Contains(errOut, "2 --exe files fit") || !strings.Contains(out, "qleaf+") {
		t.Errorf("two files that fit: want one warning and symbols, stderr:\n%s\nstdout:\n%s", errOut, out)
	}
}
