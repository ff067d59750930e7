// Package demo builds and runs the bundled C program that `rewind demo`
// captures: threads blocked in libc under application code with frame
// pointers, the textbook case where frame-pointer unwinding loses frames.
package demo

import (
	"bufio"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Source is the demo program's C source.
//
//go:embed csrc/demo.c
var Source []byte

// Build compiles the demo into dir with gcc (-O2, frame pointers kept in the
// program itself) and returns the executable's path.
func Build(dir string) (string, error) {
	src := filepath.Join(dir, "demo.c")
	exe := filepath.Join(dir, "demo")
	if err := os.WriteFile(src, Source, 0o644); err != nil {
		return "", err
	}
	cmd := exec.Command("gcc", "-O2", "-g", "-fno-omit-frame-pointer", "-pthread", src, "-o", exe)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("compiling the demo with gcc: %v\n%s", err, out)
	}
	return exe, nil
}

// Start runs the demo and waits until every thread is blocked.
func Start(exe string) (*exec.Cmd, error) {
	cmd := exec.Command(exe)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && !strings.HasPrefix(line, "ready") {
			err = fmt.Errorf("unexpected output %q", line)
		}
		ready <- err
	}()
	select {
	case err = <-ready:
	case <-time.After(10 * time.Second):
		err = fmt.Errorf("timed out")
	}
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("demo program did not become ready: %v", err)
	}
	return cmd, nil
}

// Gcore writes a core file of the running process pid with gdb's gcore and
// returns its path. The process keeps running, unchanged.
func Gcore(pid int, prefix string) (string, error) {
	if _, err := exec.LookPath("gcore"); err != nil {
		return "", fmt.Errorf("gcore (from gdb) is needed to capture the demo: %v", err)
	}
	out, err := exec.Command("gcore", "-o", prefix, fmt.Sprint(pid)).CombinedOutput()
	core := fmt.Sprintf("%s.%d", prefix, pid)
	if err != nil {
		return "", fmt.Errorf("gcore: %v\n%s", err, out)
	}
	if _, err := os.Stat(core); err != nil {
		return "", fmt.Errorf("gcore wrote no %s:\n%s", core, out)
	}
	return core, nil
}
