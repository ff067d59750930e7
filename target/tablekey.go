package target

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	"github.com/rewindstack/rewind/elfobj"
)

// tableKey names an object's unwind table in the table cache: its
// build-id and a hash of everything unwindtable.BuildFile reads (the
// architecture, the CFI sections' addresses and bytes, the text and GOT
// addresses that pointer encodings are relative to). A build-id alone is a claim the
// file makes about itself — two programs linked with the same
// --build-id=0x…, or a static program given libc's, would share a table
// — so the contents decide. An object without a build-id (Go's
// toolchain and the programs it builds have only Go's own) is named by
// the hash alone, under "00", so that its table is kept in the cache and
// used from it like any other: built anew by every report instead, the
// tables of a build's Go tools held 30 MB of a report's heap. It returns
// "" when the object's CFI cannot be read.
func tableKey(f *elfobj.File) string {
	bid := f.BuildIDHex()
	if bid == "" {
		bid = "00"
	}
	h := sha256.New()
	var b []byte
	b = append(b, byte(f.Arch), byte(f.Class))
	b = binary.LittleEndian.AppendUint64(b, uint64(f.Machine))
	if f.ByteOrder != nil {
		b = append(b, f.ByteOrder.String()...)
	}
	for _, s := range []*elfobj.Section{f.Text, f.GotPlt} {
		if s != nil {
			b = binary.LittleEndian.AppendUint64(b, s.Addr)
		} else {
			b = append(b, 0xff)
		}
	}
	h.Write(b)
	for _, s := range []*elfobj.Section{f.EhFrame, f.DebugFrame} {
		if s == nil {
			h.Write([]byte{0})
			continue
		}
		data, err := s.Load()
		if err != nil {
			return ""
		}
		var hdr [17]byte
		hdr[0] = 1
		binary.LittleEndian.PutUint64(hdr[1:], s.Addr)
		binary.LittleEndian.PutUint64(hdr[9:], uint64(len(data)))
		h.Write(hdr[:])
		h.Write(data)
	}
	return bid + "-" + hex.EncodeToString(h.Sum(nil)[:16])
}
