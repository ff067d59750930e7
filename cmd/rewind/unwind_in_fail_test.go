package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnwindInFallback runs rewind where the BPF programs cannot load:
// as nobody (no privilege), and as root with the kernel's BTF hidden (a
// private mount namespace with an empty /sys/kernel/btf). --unwind-in auto
// (the default) says in one line why it unwinds in user space;
// --unwind-in kernel fails with that reason, for record and agent. (A
// verifier refusal makes its own line: bpfunwind's TestLoadErrorVerifier.)
func TestUnwindInFallback(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running as nobody and hiding BTF need root")
	}
	setpriv, err1 := exec.LookPath("setpriv")
	unshare, err2 := exec.LookPath("unshare")
	if err1 != nil || err2 != nil {
		t.Skip("setpriv and unshare (util-linux) are not installed")
	}
	// A directory nobody can read and write: the binary, its output.
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(out, 0o777)
	bin := filepath.Join(dir, "rewind")
	b, err := os.ReadFile(rewindBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	asNobody := []string{setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--inh-caps=-all", "--"}
	noBTF := []string{unshare, "-m", "sh", "-c", `mount -t tmpfs none /sys/kernel/btf && exec "$@"`, "sh"}
	const (
		noPriv = "not permitted to load BPF programs: run rewind as root or give it CAP_BPF and CAP_PERFMON (setcap cap_bpf,cap_perfmon=ep rewind)"
		btf    = "no kernel BTF (/sys/kernel/btf/vmlinux)"
	)
	folded := filepath.Join(out, "p.folded")
	cases := []struct {
		name   string
		prefix []string
		args   []string
		want   string // the line's text
		fails  bool
	}{
		{"nobody-record-auto", asNobody, []string{"record", "-F", "99", "-o", folded, "--", "true"}, "unwinding in user space (--unwind-in auto): " + noPriv, false},
		{"nobody-record-kernel", asNobody, []string{"record", "--unwind-in", "kernel", "-o", folded, "--", "true"}, "rewind record: --unwind-in kernel: " + noPriv, true},
		{"nobody-agent-kernel", asNobody, []string{"agent", "--unwind-in", "kernel", "-d", "1", "--out-dir", out}, "--unwind-in kernel: " + noPriv, true},
		{"nobtf-record-auto", noBTF, []string{"record", "-F", "99", "-o", folded, "--", "true"}, "unwinding in user space (--unwind-in auto): " + btf, false},
		{"nobtf-record-kernel", noBTF, []string{"record", "--unwind-in", "kernel", "-o", folded, "--", "true"}, "rewind record: --unwind-in kernel: " + btf, true},
		{"nobtf-agent-kernel", noBTF, []string{"agent", "--unwind-in", "kernel", "-d", "1", "--out-dir", out}, "--unwind-in kernel: " + btf, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			argv := append(append(append([]string(nil), c.prefix...), bin), c.args...)
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Dir = out
			cmd.Env = append(os.Environ(), "HOME="+out, "XDG_CACHE_HOME="+out)
			b, err := cmd.CombinedOutput()
			stderr := string(b)
			if strings.Contains(stderr, "mount: ") || strings.Contains(stderr, "setpriv: ") {
				t.Skipf("cannot set the scene here: %s", stderr)
			}
			lines := 0
			for _, l := range strings.Split(stderr, "\n") {
				if strings.Contains(l, c.want) {
					lines++
				}
			}
			if lines != 1 {
				t.Errorf("%q in %d lines, want 1:\n%s", c.want, lines, stderr)
			}
			if c.fails && err == nil {
				t.Errorf("succeeded:\n%s", stderr)
			}
			if !c.fails && strings.Contains(stderr, "--unwind-in kernel") {
				t.Errorf("auto failed as kernel does:\n%s", stderr)
			}
		})
	}
}
