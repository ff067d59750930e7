//go:build !linux

package main

// threadID returns 0: thread priorities are set on Linux only.
func threadID() int { return 0 }

// setNice does nothing and reports false.
func setNice(tid, nice int) bool { return false }
