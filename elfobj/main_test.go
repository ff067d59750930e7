package elfobj

import (
	"os"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
)

// TestMain removes the fixtures' build directory (fixture.Dir) after the
// tests: fixture.Build leaves it in the temporary directory otherwise.
func TestMain(m *testing.M) { os.Exit(fixture.Main(m)) }
