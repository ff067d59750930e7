package session_test

import (
	"os"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
)

// TestMain ends the processes the tests started and removes their
// temporary files, also when a test times out (see fixture.Guard).
func TestMain(m *testing.M) { os.Exit(fixture.Main(m)) }
