package main

import (
	"flag"
)

const unwindInHelp = "unwind user stacks in `WHERE`: kernel (a BPF program walks rewind's unwind tables at sample time and counts " +
	"stacks in the kernel: no stack copies, nothing lost; needs root, or CAP_BPF and CAP_PERFMON), user (stack copies " +
	"unwound by rewind afterwards), or auto: kernel when the BPF programs load, else user with a one-line note"

// unwindInFlag defines --unwind-in.
func unwindInFlag(fs *flag.FlagSet) *string { return fs.String("unwind-in", "auto", unwindInHelp) }

// checkUnwindIn rejects an unknown --unwind-in.
func checkUnwindIn(mode string) error {
	switch mode {
	case "kernel", "user", "auto":
		return nil
	}
	return usagef("--unwind-in %q: want kernel, user or auto", mode)
}
