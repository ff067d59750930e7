// Package live captures the threads of a running process as a snapshot:
// registers and stack copies taken while every thread is stopped for as
// short a time as possible, plus the process's mappings. Unwinding happens
// afterwards, from the copies.
package live

import (
	_ "golang.org/x/sys/unix" // ptrace, process_vm_readv
)
