package main

import "golang.org/x/sys/unix"

// threadID returns the calling thread's ID.
func threadID() int { return unix.Gettid() }

// setNice sets thread tid's nice value, reporting whether it could.
func setNice(tid, nice int) bool { return unix.Setpriority(unix.PRIO_PROCESS, tid, nice) == nil }
