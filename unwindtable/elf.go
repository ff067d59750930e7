package unwindtable

import (
	"errors"
	"fmt"

	"github.com/rewindstack/rewind/cfi"
	"github.com/rewindstack/rewind/elfobj"
)

// BuildFile compiles the CFI of an object (.eh_frame first, then
// .debug_frame for what it does not cover) into an unwind table. The
// object's sections are read here, beside the compiler, so that the
// packages holding objects (target) need not know the CFI's encoding.
func BuildFile(f *elfobj.File) (*Table, error) {
	var secs []*cfi.Section
	if s := f.EhFrame; s != nil {
		secs = append(secs, CFISection(f, s, cfi.EhFrame))
	}
	if s := f.DebugFrame; s != nil {
		secs = append(secs, CFISection(f, s, cfi.DebugFrame))
	}
	t, err := Build(f.Arch, secs...)
	if err != nil {
		if fe := (*cfi.FormatError)(nil); errors.As(err, &fe) && fe.Section != "" {
			return nil, err // its section is named "PATH .eh_frame" (CFISection)
		}
		return nil, fmt.Errorf("%s: %w", f.Path, err)
	}
	return t, nil
}

// CFISection describes one of an object's CFI sections for package cfi.
func CFISection(f *elfobj.File, s *elfobj.Section, kind cfi.Kind) *cfi.Section {
	ptr := 8
	if f.Class == 1 { // ELFCLASS32
		ptr = 4
	}
	sec := &cfi.Section{
		Name:      f.Path + " " + s.Name,
		Kind:      kind,
		Data:      s.Data,
		Addr:      s.Addr,
		ByteOrder: f.ByteOrder,
		PtrSize:   ptr,
	}
	if f.Text != nil {
		sec.TextAddr = f.Text.Addr
	}
	if f.GotPlt != nil {
		sec.DataAddr = f.GotPlt.Addr
	}
	return sec
}

// GetFile returns f's table under key: a partial one (GetPartial) when
// the cache makes them and f's CFI is a searchable .eh_frame only, the
// whole table (Get, BuildFile) otherwise.
func (c *Cache) GetFile(key string, f *elfobj.File) (*Table, error) {
	if c.Partial {
		if hdr, eh := partialSource(f); hdr != nil {
			return c.GetPartial(key, f.Arch, hdr, eh)
		}
	}
	return c.Get(key, func() (*Table, error) { return BuildFile(f) })
}

// partialSource returns what a partial table of f is compiled from (see
// NewPartial): its .eh_frame_hdr's search table and its .eh_frame, when
// these are all the CFI it has; nil otherwise (the whole table is built
// then).
func partialSource(f *elfobj.File) (*cfi.EhFrameHdr, *cfi.Section) {
	if f.EhFrame == nil || f.EhFrameHdr == nil || f.DebugFrame != nil {
		return nil, nil
	}
	hd, err := f.EhFrameHdr.Load()
	if err != nil {
		return nil, nil
	}
	if _, err := f.EhFrame.Load(); err != nil {
		return nil, nil
	}
	hdr, err := cfi.ParseEhFrameHdr(hd, f.EhFrameHdr.Addr, f.ByteOrder, f.Path+" .eh_frame_hdr")
	if err != nil || hdr.FDECount == 0 {
		return nil, nil
	}
	eh := CFISection(f, f.EhFrame, cfi.EhFrame)
	if hdr.EhFramePtr != eh.Addr {
		return nil, nil
	}
	return hdr, eh
}
