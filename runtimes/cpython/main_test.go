package cpython_test

import (
	"os"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
)

func TestMain(m *testing.M) { os.Exit(fixture.Main(m)) }
