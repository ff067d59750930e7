package perfdata

import (
	"encoding/binary"
	"fmt"
)

// Records perf writes only in pipe-mode files (perf record -o -), where
// the header sections of a file are records instead.
const (
	recordHeaderAttr    = 64 // PERF_RECORD_HEADER_ATTR: attr, then its event ids
	recordHeaderBuildID = 67 // PERF_RECORD_HEADER_BUILD_ID: a build_id_event
)

// parsePipe reads the header records of a pipe-mode perf.data image (the
// 16-byte pipe header, then records): the attributes and their event ids
// (HEADER_ATTR, all before the first sample) and the build-ids
// (HEADER_BUILD_ID, at the end). The data is every record after the
// header; Records skips the header records as it skips any record it
// does not need.
func (f *File) parsePipe() error {
	le := binary.LittleEndian
	data := f.data
	off := int64(pipeHeaderSize)
	f.dataOff, f.dataEnd = off, int64(len(data))
	for off+recordHeaderSize <= int64(len(data)) {
		typ := le.Uint32(data[off:])
		size := int64(le.Uint16(data[off+6:]))
		if size < recordHeaderSize || size > int64(len(data))-off {
			break // Records says what is wrong, after the records before it
		}
		rec := data[off : off+size]
		switch typ {
		case recordHeaderAttr:
			body := rec[recordHeaderSize:]
			if len(body) < 8 {
				return &FormatError{Pkg: "perfdata", File: f.Path, Offset: uint64(off), Msg: "attribute record too short"}
			}
			asize := int64(le.Uint32(body[4:]))
			if asize < attrSizeVer0 || asize > int64(len(body)) || (int64(len(body))-asize)%8 != 0 {
				return &FormatError{Pkg: "perfdata", File: f.Path, Offset: uint64(off), Msg: fmt.Sprintf("attribute of %d bytes in a record of %d", asize, size)}
			}
			a, err := ParseAttr(body[:asize])
			if err != nil {
				return &FormatError{Pkg: "perfdata", File: f.Path, Offset: uint64(off), Msg: err.Error()}
			}
			idx := len(f.Attrs)
			f.Attrs = append(f.Attrs, &a)
			for p := asize; p < int64(len(body)); p += 8 {
				f.IDs[le.Uint64(body[p:])] = idx
			}
		case recordHeaderBuildID:
			ids, err := parseBuildIDs(rec, off, f.Path)
			if err != nil && f.FeatureErr == nil {
				f.FeatureErr = err
			}
			f.BuildIDs = append(f.BuildIDs, ids...)
		}
		off += size
	}
	if len(f.Attrs) == 0 {
		return &FormatError{Pkg: "perfdata", File: f.Path, Offset: pipeHeaderSize, Msg: "pipe-mode perf.data without an attribute record"}
	}
	return nil
}
