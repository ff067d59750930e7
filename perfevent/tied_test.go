package perfevent

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestHeldCommandExitsWithoutGoAhead closes a held command's pipe without
// the go-ahead, as rewind's death does: the shell must exit, not exec the
// program.
func TestHeldCommandExitsWithoutGoAhead(t *testing.T) {
	ran := filepath.Join(t.TempDir(), "ran")
	c, err := HoldCommand([]string{"sh", "-c", `touch "$0"`, ran}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.release.Close()
	err = c.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 125 {
		t.Errorf("held shell ended with %v, want exit status 125", err)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("the program ran without the go-ahead")
	}
}

// TestHeldCommandRunsOnRelease checks the go-ahead still execs the program.
func TestHeldCommandRunsOnRelease(t *testing.T) {
	ran := filepath.Join(t.TempDir(), "ran")
	c, err := HoldCommand([]string{"sh", "-c", `touch "$0"`, ran}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ran); err != nil {
		t.Error("the program did not run after Release")
	}
}
