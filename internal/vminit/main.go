// Command vminit is the /init of the initramfs scripts/verify-old-kernel.sh
// boots in a virtual machine: it mounts the file systems the BPF tests
// need, runs /test (a test binary) with the arguments in /test.args, one
// a line, prints the result on the console and powers the machine off.
// Its output ends with "VMINIT PASS" or "VMINIT FAIL: reason".
package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/sys/unix"
)

func main() {
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "vminit: runs as a virtual machine's init only")
		os.Exit(2)
	}
	err := run()
	if err != nil {
		fmt.Printf("VMINIT FAIL: %v\n", err)
	} else {
		fmt.Println("VMINIT PASS")
	}
	unix.Sync()
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	select {} // init must not exit: the kernel panics (and, with panic=-1, reboots, which -no-reboot stops)
}

func run() error {
	for _, m := range []struct{ src, dir, fstype string }{
		{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"},
		{"tmpfs", "/tmp", "tmpfs"}, {"tracefs", "/sys/kernel/tracing", "tracefs"},
		{"debugfs", "/sys/kernel/debug", "debugfs"}, {"bpffs", "/sys/fs/bpf", "bpf"},
	} {
		os.MkdirAll(m.dir, 0o755)
		if err := unix.Mount(m.src, m.dir, m.fstype, 0, ""); err != nil && err != unix.EBUSY {
			return fmt.Errorf("mounting %s on %s: %w", m.fstype, m.dir, err)
		}
	}
	var u unix.Utsname
	unix.Uname(&u)
	fmt.Printf("VMINIT kernel %s %s\n", unix.ByteSliceToString(u.Release[:]), unix.ByteSliceToString(u.Version[:]))
	b, err := os.ReadFile("/test.args")
	if err != nil {
		return err
	}
	var args []string
	for _, a := range strings.Split(string(b), "\n") {
		if a != "" {
			args = append(args, a)
		}
	}
	cmd := exec.Command("/test", args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
	cmd.Env = []string{"PATH=/", "TMPDIR=/tmp", "HOME=/"}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("/test: %w", err)
	}
	return nil
}
