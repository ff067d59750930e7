package symbolize

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"unsafe"
)

// TestMappedInflate decodes a stream mapped from a file, and one whose
// file is cut short under the mapping: an error, not a SIGBUS.
func TestMappedInflate(t *testing.T) {
	in := testInputs()[5]
	z := zlibOf(t, in, 6)
	path := filepath.Join(t.TempDir(), "z")
	if err := os.WriteFile(path, append([]byte("pad"), z...), 0o600); err != nil {
		t.Fatal(err)
	}
	file, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if mapFile(file, 3, int64(len(z))+1) != nil {
		t.Fatal("mapped past the end of the file")
	}
	for _, cut := range []bool{false, true} {
		m := mapFile(file, 3, int64(len(z)))
		if m == nil {
			t.Fatal("not mapped")
		}
		f, err := newInflater(m.data, make([]byte, len(in)))
		if err != nil {
			t.Fatal(err)
		}
		f.mapping = m
		if err := f.run(1000); err != nil {
			t.Fatal(err)
		}
		if cut {
			if err := file.Truncate(0); err != nil {
				t.Fatal(err)
			}
		}
		err = f.run(len(in))
		switch {
		case cut && err != errUnreadable:
			t.Fatalf("file cut short: %v, want %v", err, errUnreadable)
		case !cut && (err != nil || !bytes.Equal(f.out, in)):
			t.Fatalf("mapped: %v, or the output differs", err)
		}
		if f.mapping != nil || f.in != nil {
			t.Fatal("mapping kept after the stream ended")
		}
	}
}

// TestBigBuffer: buffers of every size are zeroed, of the size asked for,
// and those of a huge page or more start at a huge-page boundary.
func TestBigBuffer(t *testing.T) {
	for _, n := range []uint64{0, 1, hugePage - 1, hugePage, hugePage + 4096, 3*hugePage + 1} {
		b := bigBuffer(n)
		if uint64(len(b)) != n || uint64(cap(b)) != n {
			t.Fatalf("bigBuffer(%d): len %d cap %d", n, len(b), cap(b))
		}
		for i, c := range b {
			if c != 0 {
				t.Fatalf("bigBuffer(%d)[%d] = %d, want zeroed memory", n, i, c)
			}
		}
		if n >= hugePage && uintptr(unsafe.Pointer(&b[0]))%hugePage != 0 {
			t.Errorf("bigBuffer(%d) starts at %p, not at a huge-page boundary", n, &b[0])
		}
		for i := range b {
			b[i] = byte(i)
		}
	}
}

// TestBuffersOutsideHeap: a buffer mapped outside the heap has the size
// asked for, starts at a huge page boundary, is zero and can be written.
func TestBuffersOutsideHeap(t *testing.T) {
	BuffersOutsideHeap(true)
	defer BuffersOutsideHeap(false)
	n := uint64(3*hugePage + 12345)
	b := bigBuffer(n)
	if uint64(len(b)) != n || uint64(cap(b)) != n {
		t.Fatalf("len %d cap %d, want %d", len(b), cap(b), n)
	}
	if uintptr(unsafe.Pointer(&b[0]))%hugePage != 0 {
		t.Errorf("buffer at %p, not at a huge page boundary", &b[0])
	}
	for i := 0; i < len(b); i += 4096 {
		if b[i] != 0 {
			t.Fatalf("byte %d is %d", i, b[i])
		}
		b[i] = 1
	}
	b[n-1] = 1
}
