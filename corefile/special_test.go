package corefile

import (
	"debug/elf"
	"encoding/binary"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rewindstack/rewind/target"
	"golang.org/x/sys/unix"
)

// TestNTFileSpecialFiles: a core whose NT_FILE names a FIFO or a device
// does not make rewind block on it or open the device: reading the
// mapping fails at once, saying what the file is.
func TestNTFileSpecialFiles(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, kind string }{{fifo, "a FIFO"}, {"/dev/zero", "a character device"}} {
		bo := binary.LittleEndian
		hdr := make([]byte, 0x1000)
		copy(hdr, fakeSO)
		core := buildCore(testCore{
			bo: bo,
			notes: []testNote{
				{"CORE", ntPrstatus, prstatus64(bo, 100, 11, make([]uint64, 27))},
				{"CORE", ntFile, ntFile64(bo, 4096, []target.Mapping{{Start: 0x400000, End: 0x402000, Path: tc.path}})},
			},
			loads: []testLoad{{vaddr: 0x400000, memsz: 0x2000, data: hdr, flags: elf.PF_R | elf.PF_X}},
		})
		c, err := Open(writeTemp(t, "core", core))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.ReadMemory(0x401000, make([]byte, 8)) }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), tc.kind) {
				t.Errorf("%s: ReadMemory = %v, want an error naming %s", tc.path, err, tc.kind)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("ReadMemory blocked on %s named by NT_FILE", tc.path)
		}
		c.Close()
	}
}
