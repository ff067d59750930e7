package bpfunwind

import (
	"os"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// TestLoadErrorVerifier: a program the kernel's verifier refuses (one
// that returns an uninitialized register) makes the one line Load
// returns, for --unwind-in auto's note and --unwind-in kernel's error.
func TestLoadErrorVerifier(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loading BPF programs needs root")
	}
	_, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "GPL",
		Instructions: asm.Instructions{asm.Return()}})
	if err == nil {
		t.Fatal("the verifier took a program returning an uninitialized R0")
	}
	msg := loadError(err).Error()
	t.Log(msg)
	if !strings.HasPrefix(msg, "the kernel's verifier refused the unwinder: ") || strings.Contains(msg, "\n") {
		t.Errorf("load error %q", msg)
	}
}
