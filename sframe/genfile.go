package sframe

import (
	"fmt"
	"io"
	"os"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/internal/fsafe"
	"github.com/rewindstack/rewind/internal/outfile"
)

// GenFileOptions says what GenerateFile writes.
type GenFileOptions struct {
	// Version is the SFrame version written (see GenOptions).
	Version uint8
	// Separate writes only the section's bytes, encoded for the section
	// address Addr (0: a section that is not loaded); otherwise the
	// output is a copy of the input with the section added (AddToELF).
	Separate bool
	Addr     uint64
	// Generated, when set, is called once the section is generated,
	// before anything is written: to list the functions left out
	// (Stats.Skipped), named from f.
	Generated func(f *elfobj.File, g *Generated)
}

// GenFile is what GenerateFile wrote.
type GenFile struct {
	*Generated
	// Addr is the address the section was encoded for; Note, for a
	// section added to a copy, says where it went (Insertion.Note).
	Addr uint64
	Note string
	// CFIBytes is the size of the input's .eh_frame and .eh_frame_hdr,
	// to compare the section with.
	CFIBytes uint64
}

// maxCopyInput bounds the file GenerateFile copies: the copy is built in
// memory, twice (the output and its read-back check).
const maxCopyInput = 1 << 30

// GenerateFile compiles the CFI of the ELF file in into an .sframe
// section and writes it to out (outfile.WriteFile: a file there is
// replaced but keeps its owner and mode), as objcopy --add-section does;
// a new copy is executable like in, within the umask.
func GenerateFile(in, out string, opt GenFileOptions) (*GenFile, error) {
	f, err := elfobj.Open(in)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	g, err := Generate(f, GenOptions{Version: opt.Version})
	if err != nil {
		return nil, err
	}
	if opt.Generated != nil {
		opt.Generated(f, g)
	}
	res := &GenFile{Generated: g, Addr: opt.Addr}
	if f.EhFrame != nil {
		res.CFIBytes += f.EhFrame.Size
	}
	if f.EhFrameHdr != nil {
		res.CFIBytes += f.EhFrameHdr.Size
	}
	var data []byte
	if opt.Separate {
		if data, err = g.EncodeChecked(opt.Addr); err != nil {
			return nil, err
		}
	} else {
		raw, err := readInput(in)
		if err != nil {
			return nil, err
		}
		var ins Insertion
		if data, ins, err = AddToELF(raw, g); err != nil {
			return nil, fmt.Errorf("%s: %w", in, err)
		}
		res.Addr, res.Note = ins.Addr, ins.Note
	}
	perm := os.FileMode(0o666)
	if st, err := os.Stat(in); err == nil && !opt.Separate {
		perm = st.Mode().Perm()
	}
	if err := outfile.WriteFile(out, data, perm); err != nil {
		return nil, err
	}
	return res, nil
}

// readInput reads the whole of the regular file path, up to maxCopyInput
// bytes, refusing FIFOs and devices (fsafe.Open).
func readInput(path string) ([]byte, error) {
	fh, st, err := fsafe.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	if st.Size() > maxCopyInput {
		return nil, fmt.Errorf("%s: %d bytes: rewind copies files of at most %d bytes (1 GiB) (--separate writes only the section)", path, st.Size(), maxCopyInput)
	}
	b := make([]byte, st.Size())
	if _, err := io.ReadFull(fh, b); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}
