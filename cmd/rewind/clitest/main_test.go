package clitest

import (
	"os"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
)

// rewindBin is the rewind command under test, built by TestMain.
var rewindBin string

// TestMain builds rewind as the test binary is built (its packages
// reused), and runs the tests under fixture.Guard.
func TestMain(m *testing.M) { os.Exit(fixture.MainWithRewind(m, &rewindBin, false)) }

func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return fixture.Run(t, rewindBin, args...)
}
