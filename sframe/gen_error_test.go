package sframe_test

import (
	"strings"
	"testing"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/sframe"
)

// TestGenerateErrorNamesFileOnce: a malformed .eh_frame gives an error
// naming the file, the section and the offset, each once (cfi's errors
// name the file already: Generate must not say it again).
func TestGenerateErrorNamesFileOnce(t *testing.T) {
	path := fixture.BadEhFrame(t)
	f, err := elfobj.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = sframe.Generate(f, sframe.GenOptions{})
	if err == nil {
		t.Fatal("no error for a corrupt .eh_frame")
	}
	if msg := err.Error(); strings.Count(msg, path) != 1 || !strings.Contains(msg, ".eh_frame+0x") {
		t.Errorf("error %q: want the file once, the section and the offset", msg)
	}
}
