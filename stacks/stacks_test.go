package stacks

import (
	"testing"

	"github.com/rewindstack/rewind/output"
)

func TestReachesRoot(t *testing.T) {
	th := func(names ...string) *output.Thread {
		var fs []output.Frame
		for _, n := range names {
			fs = append(fs, output.Frame{Function: n})
		}
		return &output.Thread{Frames: fs}
	}
	for _, c := range []struct {
		t    *output.Thread
		want bool
	}{
		{th("read", "main", "__libc_start_call_main", "__libc_start_main@@GLIBC_2.34"), true},
		{th("poll", "worker", "start_thread", "__clone3"), true},
		{th("poll", "worker", "start_thread"), true},
		{th("poll", "worker"), false},
		{th("x", "start_thread", "a", "b", "c"), false}, // root too far from the end
		{th(), false},
	} {
		if got := ReachesRoot(c.t); got != c.want {
			t.Errorf("ReachesRoot(%v) = %v", c.t.Frames, got)
		}
	}
}
