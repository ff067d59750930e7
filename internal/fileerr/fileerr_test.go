package fileerr

import (
	"errors"
	"io"
	"testing"
)

func TestError(t *testing.T) {
	for _, c := range []struct {
		e    FormatError
		want string
	}{
		{FormatError{Pkg: "cfi", Section: ".eh_frame", Offset: 0x10, Msg: "bad CIE"}, "cfi: .eh_frame+0x10: bad CIE"},
		{FormatError{Pkg: "elfobj", File: "/x", Offset: 0x40, Msg: "section headers", Err: io.ErrUnexpectedEOF}, "elfobj: /x: offset 0x40: section headers: unexpected EOF"},
		{FormatError{File: "perf.data", Section: "MMAP2 record", Offset: 8, Msg: "short"}, "perf.data: MMAP2 record+0x8: short"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
	e := error(&FormatError{Err: io.ErrUnexpectedEOF})
	if !errors.Is(e, io.ErrUnexpectedEOF) {
		t.Error("Err is not unwrapped")
	}
}
