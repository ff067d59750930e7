package output

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func frames(pcs ...uint64) []Frame {
	var fs []Frame
	for _, pc := range pcs {
		fs = append(fs, Frame{PC: pc, Function: "f", Method: "fp"})
	}
	return fs
}

func TestAlignFrames(t *testing.T) {
	cases := []struct {
		a, b []uint64
		want string
	}{
		{[]uint64{1, 2, 3}, []uint64{1, 2, 3}, "0:0 1:1 2:2"},
		{[]uint64{1, 3}, []uint64{1, 2, 3, 4}, "0:0 -:1 1:2 -:3"},        // a lost frames
		{[]uint64{1, 9, 8}, []uint64{1, 2}, "0:0 1:- 2:- -:1"},           // a went astray
		{[]uint64{}, []uint64{5}, "-:0"},                                 // a empty
		{[]uint64{1, 4, 2}, []uint64{1, 2, 3}, "0:0 1:- 2:1 -:2"},        // garbage then resync
		{[]uint64{7, 7, 7}, []uint64{7, 7}, "0:0 1:1 2:-"},               // repeated PCs (recursion)
		{[]uint64{1, 2, 3}, []uint64{3}, "0:- 1:- 2:0"},                  // b shorter
		{[]uint64{1, 2}, []uint64{2, 1}, "-:0 0:1 1:-"},                  // crossing
		{[]uint64{1, 5, 6, 3}, []uint64{1, 2, 3}, "0:0 1:- 2:- -:1 3:2"}, // a garbage before b's frame
	}
	for _, c := range cases {
		var parts []string
		for _, r := range alignFrames(frames(c.a...), frames(c.b...)) {
			s := func(i int) string {
				if i < 0 {
					return "-"
				}
				return string(rune('0' + i))
			}
			parts = append(parts, s(r[0])+":"+s(r[1]))
		}
		if got := strings.Join(parts, " "); got != c.want {
			t.Errorf("align(%v, %v) = %s, want %s", c.a, c.b, got, c.want)
		}
	}
}

func TestWriters(t *testing.T) {
	pause := int64(420)
	r := &Report{PID: 7, PauseUS: &pause, Threads: []Thread{{TID: 8, Name: "w", End: "outermost",
		Frames: []Frame{{PC: 0x401000, Function: "main", Offset: 0x10, Module: "/bin/x", Method: "context"}, {PC: 0x2, Method: "fp"}}}}}
	var b bytes.Buffer
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PID 7 (paused 420 us)", "TID 8: w", "#0  0x0000000000401000 main+0x10 (x) [context]", "#1  0x0000000000000002 ?? [fp]", "end: outermost"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := WriteJSON(&b, r); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back["pause_us"] != float64(420) || back["pid"] != float64(7) {
		t.Errorf("JSON: %s", b.String())
	}
	fr := back["threads"].([]any)[0].(map[string]any)["frames"].([]any)[0].(map[string]any)
	if fr["pc"] != float64(0x401000) || fr["method"] != "context" || fr["inlined"] != false {
		t.Errorf("JSON frame: %v", fr)
	}
	b.Reset()
	WriteSideBySide(&b, r, r, "left", "right")
	if !strings.Contains(b.String(), "left: 2 frames") || strings.Contains(b.String(), "·") {
		t.Errorf("side by side of identical reports:\n%s", b.String())
	}
}

func TestGrouped(t *testing.T) {
	fr := func(pcs ...uint64) []Frame { return frames(pcs...) }
	r := &Report{PID: 1, Threads: []Thread{
		{TID: 1, Name: "main", End: "outermost", Frames: fr(1, 2)},
		{TID: 2, Name: "pool", End: "outermost", Frames: fr(5, 6, 7)},
		{TID: 3, Name: "pool", End: "outermost", Frames: fr(5, 6, 7)},
		{TID: 4, Name: "pool", End: "no-unwind-info", Frames: fr(5, 6, 7)}, // same PCs, different end
	}}
	g := GroupThreads(r)
	if len(g) != 3 || len(g[0].TIDs) != 2 || g[0].TIDs[0] != 2 || g[0].TIDs[1] != 3 || g[1].TIDs[0] != 1 {
		t.Fatalf("groups: %+v", g)
	}
	var b bytes.Buffer
	WriteGrouped(&b, r)
	if !strings.Contains(b.String(), "2 threads: 2 (pool) 3 (pool)\n#0 ") || strings.Count(b.String(), "#0 ") != 3 {
		t.Errorf("grouped output:\n%s", b.String())
	}
}

// TestGroupedFibersByThread: identical fiber stacks of two threads are two
// groups, each headed by its thread.
func TestGroupedFibersByThread(t *testing.T) {
	one, two := 10, 20
	id := func(n int64) *int64 { return &n }
	r := &Report{PID: 1, Threads: []Thread{{TID: 10, Name: "tx", End: "outermost", Frames: frames(1)}, {TID: 20, End: "outermost", Frames: frames(2)}},
		Fibers: []Fiber{
			{Thread: &one, Kind: "tarantool", ID: id(101), End: "outermost", Frames: frames(7, 8)},
			{Thread: &two, Kind: "tarantool", ID: id(201), End: "outermost", Frames: frames(7, 8)},
			{Thread: &one, Kind: "tarantool", ID: id(102), End: "outermost", Frames: frames(7, 8)},
			{Kind: "ucontext", Context: 0x1000, End: "outermost", Frames: frames(7, 8)},
		}}
	var b bytes.Buffer
	WriteGrouped(&b, r)
	for _, want := range []string{"2 fibers of thread 10 (tx): 101 102\n", "1 fiber of thread 20: 201\n", "1 fiber of no known thread: ucontext@0x1000\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in grouped output:\n%s", want, b.String())
		}
	}
}

// TestInterpretedFrameJSON: an interpreted frame has null for the PC,
// module and offset it does not have, and for an anonymous function's
// name, which text prints as "(unnamed)"; native frames keep their values.
func TestInterpretedFrameJSON(t *testing.T) {
	fs := []Frame{
		{Function: "", File: "init.lua", Line: 3, Method: "lua", Interpreted: true},
		{Function: "handler", File: "app.py", Line: 12, Method: "python", Interpreted: true, ParenLocation: true},
		{PC: 0x401000, Function: "", Module: "/bin/x", Method: "dwarf"},
	}
	cfn := Frame{Function: "read", File: "[C]", Method: "lua", Interpreted: true, ParenLocation: true}
	b, err := json.Marshal(fs)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"pc":null,"function":null,"offset":null,"module":null,"file":"init.lua","line":3,"inlined":false,"method":"lua"},` +
		`{"pc":null,"function":"handler","offset":null,"module":null,"file":"app.py","line":12,"inlined":false,"method":"python"},` +
		`{"pc":4198400,"function":"","offset":0,"module":"/bin/x","inlined":false,"method":"dwarf"}]`
	if string(b) != want {
		t.Errorf("JSON:\n%s\nwant:\n%s", b, want)
	}
	var back []Frame
	if err := json.Unmarshal(b, &back); err != nil || back[0].Function != "" || back[1].Function != "handler" || back[2].PC != 0x401000 {
		t.Errorf("read back: %+v %v", back, err)
	}
	var txt bytes.Buffer
	w := bufio.NewWriter(&txt)
	writeFrames(w, append(fs[:2:2], cfn), "outermost", "")
	w.Flush()
	// A C function has no line: its file alone, as debug.traceback's
	// "[C]: in function 'read'".
	if !strings.Contains(txt.String(), "(unnamed) init.lua:3 [lua]") || !strings.Contains(txt.String(), "handler (app.py:12) [python]") ||
		!strings.Contains(txt.String(), "read ([C]) [lua]") {
		t.Errorf("text:\n%s", txt.String())
	}
}

// TestGroupedJSON: --group --json folds threads and fibers as the text
// does.
func TestGroupedJSON(t *testing.T) {
	one := 1
	r := &Report{PID: 1, Threads: []Thread{
		{TID: 1, Name: "main", End: "outermost", Frames: frames(1, 2)},
		{TID: 2, Name: "pool", End: "outermost", Frames: frames(5, 6)},
		{TID: 3, Name: "pool", End: "outermost", Frames: frames(5, 6)},
	}, Fibers: []Fiber{{Thread: &one, Kind: "ucontext", Context: 0x10, End: "outermost", Frames: frames(9)},
		{Thread: &one, Kind: "ucontext", Context: 0x20, End: "outermost", Frames: frames(9)}}}
	var b bytes.Buffer
	if err := WriteGroupedJSON(&b, r); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups      []ThreadGroup `json:"groups"`
		FiberGroups []FiberGroup  `json:"fiber_groups"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Groups) != 2 || doc.Groups[0].Count != 2 || doc.Groups[0].TIDs[1] != 3 || doc.Groups[0].Names[0] != "pool" || len(doc.Groups[0].Frames) != 2 ||
		len(doc.FiberGroups) != 1 || doc.FiberGroups[0].Count != 2 || *doc.FiberGroups[0].Thread != 1 || doc.FiberGroups[0].Contexts[1] != 0x20 {
		t.Errorf("grouped JSON:\n%s", b.String())
	}
}

// TestJSONVerbatimNames: names with <, > and & (Python's "<module>",
// C++'s "operator<") are written as they are, in frames of both kinds,
// not as \u003c escapes that grep and jq users would not recognize.
func TestJSONVerbatimNames(t *testing.T) {
	r := &Report{Threads: []Thread{{TID: 1, Frames: []Frame{
		{Function: "<module>", File: "<string>", Line: 1, Method: "python", Interpreted: true, ParenLocation: true},
		{PC: 0x401000, Function: "operator<<(std::ostream&, int)", Module: "/bin/x", Method: "cfi"},
	}}}}
	var b bytes.Buffer
	if err := WriteJSON(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"function": "<module>"`, `"file": "<string>"`, `"function": "operator<<(std::ostream&, int)"`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("JSON lacks %s:\n%s", want, b.String())
		}
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || back.Threads[0].Frames[0].Function != "<module>" {
		t.Errorf("read back: %+v %v", back, err)
	}
}
