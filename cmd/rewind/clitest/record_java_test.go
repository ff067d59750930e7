package clitest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// javaSpin burns CPU in Spin.hot <- Spin.mid <- Spin.top, printing
// "ready" once the JIT has had time to compile them, until killed.
const javaSpin = `public class Spin {
    static double hot(int n) { double s = 0; for (int i = 0; i < n; i++) s += Math.sqrt(i ^ n); return s; }
    static double mid(int n) { return hot(n) + 1; }
    static double top(int n) { return mid(n) * 2; }
    public static void main(String[] a) throws Exception {
        long start = System.currentTimeMillis();
        double t = 0;
        boolean said = false;
        for (;;) {
            t += top(10000);
            if (!said && System.currentTimeMillis() - start > 3000) {
                System.out.println(t > 0 ? "ready" : "?");
                System.out.flush();
                said = true;
            }
        }
    }
}
`

// completeLine matches a fidelity table row: its mode and share.
// javaNamed matches a stack in Spin's compiled code, named as the JVM's
// perf map names it ("double Spin.hot(int)", "void
// Spin.main(java.lang.String[])" where the loop inlined the calls).
var javaNamed = regexp.MustCompile(`;(double|void) Spin\.(hot|mid|top|main)\(`)

var completeLine = regexp.MustCompile(`(?m)^\s+(kernel|auto)\s+([\d.]+)% complete`)

// startJava compiles and starts javaSpin with frame pointers kept in
// compiled code and waits until the JIT is done with it. It returns the
// JVM's PID and a function that has the JVM write its perf map (jcmd
// Compiler.perfmap; removed when the test ends).
func startJava(t *testing.T) (int, func()) {
	t.Helper()
	javac, err := exec.LookPath("javac")
	if err != nil {
		t.Fatalf("no javac (.ci/run installs openjdk-17-jdk-headless): %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Spin.java"), []byte(javaSpin), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(javac, "-J-XX:-UsePerfData", "-d", dir, filepath.Join(dir, "Spin.java")).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	// (-XX:-UsePerfData, for the JVM and the JDK's tools: no
	// /tmp/hsperfdata_USER.) C2 alone compiles each method once, so that the code the map names
	// is the code that runs once the test has seen (PrintCompilation's
	// lines) hot and top compiled (mid inlined in top) and main's loop
	// replaced on its stack (OSR): then nothing more is compiled.
	cmd := exec.Command(filepath.Join(filepath.Dir(javac), "java"), "-XX:+PreserveFramePointer", "-XX:-TieredCompilation", "-XX:-UsePerfData",
		"-XX:+PrintCompilation", "-cp", dir, "Spin")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		os.Remove(fmt.Sprintf("/tmp/perf-%d.map", pid))
		os.Remove(fmt.Sprintf("/tmp/.java_pid%d", pid)) // (jcmd's attach socket, left by a killed JVM)
	})
	// Compiled once the JVM has said ready, compiled hot and top (mid
	// inlined in top) and main's loop, and then nothing more for 2 s.
	var mu sync.Mutex
	compiled, last, said := map[string]bool{}, time.Now(), false
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			l := sc.Text()
			mu.Lock()
			said = said || l == "ready"
			if strings.Contains(l, "::") {
				last = time.Now()
			}
			for _, m := range []string{" Spin::hot (", " Spin::top (", " Spin::main "} {
				if strings.Contains(l, m) {
					compiled[m] = true
				}
			}
			mu.Unlock()
		}
	}()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		mu.Lock()
		done := said && len(compiled) == 3 && time.Since(last) > 2*time.Second
		mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("java did not say ready, compile Spin and then nothing more in 2 minutes (compiled %v)", compiled)
		}
	}
	jcmd := filepath.Join(filepath.Dir(javac), "jcmd")
	return pid, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if b, err := exec.CommandContext(ctx, jcmd, "-J-XX:-UsePerfData", strconv.Itoa(pid), "Compiler.perfmap").CombinedOutput(); err != nil {
			t.Fatalf("jcmd Compiler.perfmap: %v\n%s", err, b)
		}
	}
}

// TestRecordJITJava records a JVM running with -XX:+PreserveFramePointer
// whose compiled code is named in the perf map jcmd Compiler.perfmap
// writes, in both modes: the walks go through the compiled code and the
// interpreter by frame pointers to the thread root (>= 95% complete), and
// the main thread's samples are named with the map's names (double
// Spin.hot(int), or the main loop's compiled code they were inlined in),
// as perf report names them.
func TestRecordJITJava(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("running as uid %d: recording is tested as root", os.Geteuid())
	}
	pid, perfMap := startJava(t)
	dir := t.TempDir()
	for _, mode := range []string{"user", "kernel"} {
		t.Run(mode, func(t *testing.T) {
			perfMap()
			folded := filepath.Join(dir, mode+".folded")
			_, stderr, code := run(t, "record", "-p", strconv.Itoa(pid), "-d", "2", "--unwind-in", mode, "-F", "199", "-o", folded)
			if code != 0 {
				t.Fatalf("record exited %d:\n%s", code, stderr)
			}
			checkJITRecording(t, mode, stderr, folded, 50, func(l string) bool { return strings.Contains(l, ";JavaMain;") }, javaNamed.MatchString)
		})
	}
}

// checkJITRecording checks a recording of JIT code in mode ("user" or
// "kernel"): its fidelity row says >= 95% of the samples complete, and of
// the folded stacks the in function selects (at least least samples),
// >= 90% are named as named says.
func checkJITRecording(t *testing.T, mode, stderr, folded string, least int, in, named func(string) bool) {
	t.Helper()
	row := map[string]string{"user": "auto", "kernel": "kernel"}[mode]
	m := completeLine.FindStringSubmatch(stderr)
	if m == nil || m[1] != row {
		t.Fatalf("no %s row in the fidelity table:\n%s", row, stderr)
	}
	if pct, _ := strconv.ParseFloat(m[2], 64); pct < 95 {
		t.Errorf("%s%% of the samples complete, want >= 95%%:\n%s", m[2], stderr)
	}
	b, err := os.ReadFile(folded)
	if err != nil {
		t.Fatal(err)
	}
	total, good := 0, 0
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		i := strings.LastIndexByte(l, ' ')
		n, _ := strconv.Atoi(l[i+1:])
		if in(l) {
			total += n
			if named(l) {
				good += n
			}
		}
	}
	t.Logf("%s: %d of %d samples named from the perf map", mode, good, total)
	if total < least || good*10 < total*9 {
		t.Errorf("%s: %d of %d samples named from the perf map, want 90%% of at least %d", mode, good, total, least)
	}
}
