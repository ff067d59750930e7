package corefile

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/rewindstack/rewind/elfobj"
)

// TestParseBuildIDMatchesElfobj reads the build-id of system objects with
// parseBuildID (as BuildIDs does from a core's memory) and compares it
// with elfobj's.
func TestParseBuildIDMatchesElfobj(t *testing.T) {
	var paths []string
	if _, err := os.Stat("/bin/ls"); err == nil {
		paths = append(paths, "/bin/ls")
	}
	if m, _ := filepath.Glob("/lib/x86_64-linux-gnu/libc.so.6"); len(m) > 0 {
		paths = append(paths, m...)
	}
	if m, _ := filepath.Glob("/lib/aarch64-linux-gnu/libc.so.6"); len(m) > 0 {
		paths = append(paths, m...)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := elfobj.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		want := f.BuildID
		f.Close()
		got := parseBuildID(b[:64], func(off uint64, q []byte) bool {
			if off > uint64(len(b)) || uint64(len(q)) > uint64(len(b))-off {
				return false
			}
			copy(q, b[off:])
			return true
		})
		if !bytes.Equal(got, want) {
			t.Errorf("%s: parseBuildID %x, elfobj %x", p, got, want)
		}
	}
}

func TestGNUBuildIDNote(t *testing.T) {
	var n []byte
	n = binary.LittleEndian.AppendUint32(n, 4)
	n = binary.LittleEndian.AppendUint32(n, 3)
	n = binary.LittleEndian.AppendUint32(n, 3)
	n = append(n, "GNU\x00\xaa\xbb\xcc\x00"...)
	if got := gnuBuildIDNote(n, binary.LittleEndian, 4); !bytes.Equal(got, []byte{0xaa, 0xbb, 0xcc}) {
		t.Errorf("got %x", got)
	}
	binary.LittleEndian.PutUint32(n[4:], 1<<31) // descsz past the end
	if got := gnuBuildIDNote(n, binary.LittleEndian, 4); got != nil {
		t.Errorf("oversized note accepted: %x", got)
	}
	_ = elf.ELFMAG
}

// FuzzParseBuildID: malformed headers and notes never panic or read
// outside the image.
func FuzzParseBuildID(f *testing.F) {
	if b, err := os.ReadFile("/bin/ls"); err == nil && len(b) > 4096 {
		f.Add(b[:4096])
	}
	f.Add(make([]byte, 64))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 64 {
			return
		}
		parseBuildID(b[:64], func(off uint64, q []byte) bool {
			if off > uint64(len(b)) || uint64(len(q)) > uint64(len(b))-off {
				return false
			}
			copy(q, b[off:])
			return true
		})
	})
}
