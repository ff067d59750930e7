package fibers_test

import (
	"os"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
)

// TestMain removes the fixtures' build directory (fixture.Dir) after the
// tests: the fixtures built there stay in the temporary directory
// otherwise.
func TestMain(m *testing.M) { os.Exit(fixture.Main(m)) }
