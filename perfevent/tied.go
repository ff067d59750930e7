package perfevent

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// The kernel sends a child its parent-death signal when the thread that
// forked it exits, not the process. Go's os/exec forks from whatever thread
// the calling goroutine is on, and the runtime ends idle threads (and the
// thread of a goroutine that exits locked), so a Pdeathsig set on a plain
// cmd.Start can fire while rewind still runs, or be tied to a thread that
// outlives nothing. tiedStarter forks every command from one goroutine locked
// to its thread for the rest of the process: that thread exits only with
// rewind, and so the commands die with it, even under kill -9.
var (
	tiedOnce sync.Once
	tiedReq  chan tiedStart
)

type tiedStart struct {
	cmd  *exec.Cmd
	done chan error
}

func tiedStarter() {
	runtime.LockOSThread()
	// Never unlocked and never returning: the thread lives as long as
	// the process.
	for r := range tiedReq {
		r.done <- r.cmd.Start()
	}
}

// StartTied starts cmd so that it gets SIGKILL when rewind ends, however
// rewind ends: it sets cmd.SysProcAttr.Pdeathsig and forks from a thread
// that lives as long as the process. The signal is kept across the
// command's exec of a program that is not set-user-ID, so a wrapper's
// exec'd program dies with rewind too. A set-user-ID program drops it; a
// process the command forks is not covered (rewind reaps those as a
// subreaper while it runs).
func StartTied(cmd *exec.Cmd) error {
	tiedOnce.Do(func() {
		tiedReq = make(chan tiedStart)
		go tiedStarter()
	})
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	r := tiedStart{cmd: cmd, done: make(chan error, 1)}
	tiedReq <- r
	return <-r.done
}
