package luajit

import (
	"encoding/binary"
	"testing"

	"github.com/rewindstack/rewind/target"
)

// FuzzLuaFrames: a Lua stack in hostile memory (frame links, prototypes,
// bytecode, strings all garbage) is walked to an end, without panicking.
func FuzzLuaFrames(f *testing.F) {
	seed := make([]byte, 512)
	le := binary.LittleEndian
	le.PutUint64(seed[16:], 0x10000+0x100) // L->base
	le.PutUint32(seed[36:], 0x10000+0x40)  // L->stack
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		l := Layout{LBase: 16, LStack: 36, protoSize: 64, pSizebc: 8, pK: 16, pChunk: 40,
			pFirst: 44, pNumline: 48, pLineinfo: 52, pUvinfo: 56, pVarinfo: 60, fnPC: 16}
		w := NewWalker(&l, &target.Snapshot{Regions: []target.Region{{Addr: 0x10000, Data: data}}})
		if fs := w.Frames(0x10000); len(fs) > 64 {
			t.Errorf("%d frames", len(fs))
		}
	})
}

// TestStack: a lua_State's frames become one activation's interpreted
// frames, placed before LuaJIT's C entry, as fiber.info() names them.
func TestStack(t *testing.T) {
	st := Stack([]Frame{{Name: "handler", Source: "@app.lua", Line: 3}, {Source: "=[C]", Line: -1}})
	if st.Entry != Entry || len(st.Frames) != 2 {
		t.Fatalf("stack %+v", st)
	}
	if f := st.Frames[0]; f.Function != "handler" || f.File != "@app.lua" || f.Line != 3 || f.Method != "lua" || f.Activation != 0 || f.ParenLocation {
		t.Errorf("frame %+v", f)
	}
}
