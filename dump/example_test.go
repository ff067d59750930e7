package dump_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/rewindstack/rewind/dump"
)

// ExampleLive dumps a child process asleep in the kernel and looks for
// the libc function it sleeps in.
func ExampleLive() {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		fmt.Println(err)
		return
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	waitAsleep(cmd.Process.Pid)

	rep, err := dump.Live(cmd.Process.Pid, dump.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	found := false
	for _, th := range rep.Threads {
		for _, f := range th.Frames {
			found = found || strings.Contains(f.Function, "nanosleep")
		}
	}
	fmt.Println("threads:", len(rep.Threads), "in nanosleep:", found)
	// Output: threads: 1 in nanosleep: true
}

// waitAsleep waits until process pid sleeps in a system call: until then
// it has not reached the sleep.
func waitAsleep(pid int) {
	for range 500 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid))
		if f := strings.Fields(string(b)); err == nil && len(f) > 0 && (f[0] == "230" || f[0] == "35") { // clock_nanosleep, nanosleep (amd64)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
