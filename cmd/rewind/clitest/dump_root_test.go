package clitest

import (
	"os"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"strings"
	"testing"
)

// TestDumpRefusedAsRoot: when root cannot trace a process, the error says
// why instead of telling root to run as root.
func TestDumpRefusedAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the message under test is the one root gets")
	}
	_, errOut, code := run(t, "dump", "1")
	if code == 0 {
		t.Skip("root may trace process 1 here: no refusal to explain")
	}
	if !strings.Contains(errOut, "operation not permitted") {
		t.Skipf("dump 1 failed for another reason: %s", errOut)
	}
	if strings.Contains(errOut, "run rewind as root") {
		t.Errorf("dump 1 as root tells root to run as root: %s", errOut)
	}
	if !strings.Contains(errOut, "CAP_SYS_PTRACE") {
		t.Errorf("dump 1 as root names no cause: %s", errOut)
	}
}

// TestDumpMaxDepthSaysHow: a walk cut by --max-depth says how to get the
// rest.
func TestDumpMaxDepthSaysHow(t *testing.T) {
	exe := fixture.Build(t, "threads", fixture.Variants[0])
	core := fixture.Gcore(t, fixture.Start(t, exe))
	out, errOut, code := run(t, "dump", "--core", core, "--max-depth", "2")
	if code != 0 {
		t.Fatalf("dump: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "--max-depth N") {
		t.Errorf("dump --max-depth 2 does not say how to get the rest:\n%s", out)
	}
}
