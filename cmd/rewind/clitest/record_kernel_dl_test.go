package clitest

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestRecordUnwindInKernelDlopen records, with --unwind-in kernel, a
// program that dlopens a library after the recording began and spins in
// it, dlcloses it (unmapping it) and dlopens another, usually mapped at
// the same address, and spins in that: the samples of each library's
// function must be named after it and be under the phase that called it
// (never the first library's names for the second's code), and their
// walks must reach the thread's root.
func TestRecordUnwindInKernelDlopen(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("BPF needs root")
	}
	dir := t.TempDir()
	src, _ := filepath.Abs("../../../bpfunwind/testdata/dl.c")
	for _, b := range [][]string{
		{"gcc", "-O2", "-g", "-shared", "-fPIC", "-DLIB=hot_a", "-o", "liba.so", src},
		{"gcc", "-O2", "-g", "-shared", "-fPIC", "-DLIB=hot_b", "-o", "libb.so", src},
		{"gcc", "-O2", "-g", "-fomit-frame-pointer", "-o", "dl", src, "-ldl"},
	} {
		cmd := exec.Command(b[0], b[1:]...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", b, err, out)
		}
	}
	prog := exec.Command(filepath.Join(dir, "dl"), "2")
	stdin, _ := prog.StdinPipe()
	stdout, _ := prog.StdoutPipe()
	if err := prog.Start(); err != nil {
		t.Fatal(err)
	}
	defer prog.Process.Kill()
	progOut := bufio.NewReader(stdout)
	if l, err := progOut.ReadString('\n'); err != nil || l != "ready\n" {
		t.Fatalf("dl: %q, %v", l, err)
	}
	folded := filepath.Join(dir, "dl.folded")
	rec := exec.Command(rewindBin, "record", "--unwind-in", "kernel", "-F", "999", "-o", folded, "-p", strconv.Itoa(prog.Process.Pid))
	recErr, _ := rec.StderrPipe()
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { rec.Process.Kill(); rec.Wait() }()
	// The recording has begun when record says how it unwinds.
	errs := bufio.NewReader(recErr)
	var stderr strings.Builder
	for {
		l, err := errs.ReadString('\n')
		stderr.WriteString(l)
		if err != nil {
			t.Fatalf("record ended before recording:\n%s", stderr.String())
		}
		if strings.Contains(l, "unwinding in the kernel") {
			break
		}
	}
	stdin.Write([]byte("go\n"))
	var bases []string
	for {
		l, err := progOut.ReadString('\n')
		if err != nil {
			break
		}
		if _, at, ok := strings.Cut(strings.TrimSpace(l), " at "); ok {
			bases = append(bases, at)
		}
	}
	// Reaped, the program is gone for record, which then ends.
	if err := prog.Wait(); err != nil {
		t.Errorf("dl: %v", err)
	}
	rest, _ := errs.ReadString(0)
	stderr.WriteString(rest)
	if err := rec.Wait(); err != nil {
		t.Fatalf("record: %v\n%s", err, stderr.String())
	}
	t.Logf("liba.so and libb.so mapped at %v", bases)
	b, err := os.ReadFile(folded)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		sp := strings.LastIndexByte(l, ' ')
		c, _ := strconv.Atoi(l[sp+1:])
		for _, fn := range []string{"hot_a", "hot_b"} {
			if !strings.Contains(l, ";"+fn) {
				continue
			}
			n[fn] += c
			phase := "phase_" + fn[len(fn)-1:]
			switch {
			case strings.HasPrefix(l, "dl;_start;__libc_start_main;__libc_start_call_main;main;"+phase+";"+fn):
				n[fn+" complete"] += c
			case strings.Contains(l, ";phase_"):
				t.Errorf("%s under the wrong phase: %s", fn, l)
			}
		}
	}
	t.Logf("samples: %v", n)
	for _, fn := range []string{"hot_a", "hot_b"} {
		if n[fn] < 100 || n[fn+" complete"] < n[fn]*95/100 {
			t.Errorf("%s: %d samples, %d of them complete under main and its phase, want >= 100 and >= 95%%", fn, n[fn], n[fn+" complete"])
		}
	}
}
