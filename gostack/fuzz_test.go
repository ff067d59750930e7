package gostack

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fuzzcorpus"
)

// fuzzAnchors are real return addresses of this test binary (a captured
// stack) that fuzz inputs offset from, so that most PCs land in Go code.
func fuzzAnchors() []uintptr {
	var pcs [64]uintptr
	var n int
	_ = recurseInlined(6, func() error {
		n = CallersFP(0, pcs[:])
		return nil
	})
	return pcs[:n]
}

// fuzzPCs turns bytes into a physical stack: every 5 bytes are a mode byte
// and a 32-bit value; mode 0 offsets a real return address by up to ±32 KiB,
// mode 1 takes a real return address as is, mode 2 is the raw value.
func fuzzPCs(data []byte, anchors []uintptr) []uintptr {
	var out []uintptr
	for len(data) >= 5 && len(out) < 256 {
		mode, v := data[0], binary.LittleEndian.Uint32(data[1:5])
		data = data[5:]
		a := anchors[int(v)%len(anchors)]
		switch mode % 3 {
		case 0:
			out = append(out, a+uintptr(int64(int16(v>>8))))
		case 1:
			out = append(out, a)
		default:
			out = append(out, uintptr(v))
		}
	}
	return out
}

// TestWriteExpandFuzzCorpus regenerates testdata/fuzz/FuzzExpand when
// REWIND_WRITE_CORPUS=1.
func TestWriteExpandFuzzCorpus(t *testing.T) {
	write := fuzzcorpus.Regenerate(t, "FuzzExpand")
	for name, seed := range expandSeeds() {
		write("seed-"+name, seed.data, seed.skip)
	}
}

type expandSeed struct {
	data []byte
	skip uint16
}

func expandSeeds() map[string]expandSeed {
	real := make([]byte, 0, 5*12)
	for i := 0; i < 12; i++ {
		real = append(real, 1, byte(i), 0, 0, 0)
	}
	return map[string]expandSeed{
		"real-stack":  {real, 0},
		"real-skip3":  {real, 3},
		"offsets":     {[]byte{0, 1, 0x10, 0, 0, 0, 2, 0xf0, 0xff, 0, 0, 3, 0x80, 0x7f, 0}, 1},
		"raw":         {[]byte{2, 0, 0, 0, 0, 2, 1, 0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff}, 0},
		"empty":       {nil, 0},
		"huge-skip":   {real, 65535},
		"mixed-short": {[]byte{1, 2, 0, 0, 0, 0, 2, 1, 0, 0, 2}, 2},
	}
}

// FuzzExpand feeds Expand physical stacks made of real return addresses,
// PCs near them (inside functions, between instructions, in other
// functions) and arbitrary values: Expand must not panic, must respect dst's
// length and skip, and where no panic or top-of-stack rule applies must
// equal the runtime's own frame-pointer expansion (pprof_fpunwindExpand).
func FuzzExpand(f *testing.F) {
	for _, s := range expandSeeds() {
		f.Add(s.data, s.skip)
	}
	anchors := fuzzAnchors()
	f.Fuzz(func(t *testing.T, data []byte, skip uint16) {
		if !Supported || len(anchors) == 0 {
			t.Skip("no frame pointers")
		}
		phys := fuzzPCs(data, anchors)
		full := make([]uintptr, 4096)
		nfull := Expand(full, phys, 0)
		full = full[:nfull]

		dst := make([]uintptr, 4096)
		n := Expand(dst, phys, int(skip))
		want := full[min(int(skip), len(full)):]
		if !slices.Equal(dst[:n], want) {
			t.Fatalf("skip %d: got %x, want the tail of %x", skip, dst[:n], full)
		}
		short := make([]uintptr, 3)
		if m := Expand(short, phys, int(skip)); m > 3 || !slices.Equal(short[:m], want[:min(3, len(want))]) {
			t.Fatalf("short buffer: got %x, want prefix of %x", short[:m], want)
		}
		plain := true
		for _, pc := range phys {
			plain = plain && plainPC(pc)
		}
		if plain {
			rt := make([]uintptr, 4096)
			m := runtimeExpand(rt, phys, int(skip))
			if !slices.Equal(dst[:n], rt[:m]) {
				t.Fatalf("differs from the runtime's expansion:\n got %x\nwant %x", dst[:n], rt[:m])
			}
		}
		if n > 0 {
			fr := framesOf(dst[:n]) // symbolizing the result must not crash either
			_ = fr
		}
	})
}
