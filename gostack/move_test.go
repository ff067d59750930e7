package gostack

import (
	"runtime"
	"testing"
	"unsafe"
)

// TestStackMovesDuringWalk empties the cache and makes every cache fill
// grow the stack far enough that the runtime copies it to a new place, in
// the middle of Callers' walk: the walk must continue on the new stack and
// still return what runtime.Callers returns. It also checks that the stack
// really moved during a walk. (A walk that kept reading the old copy would
// usually still pass: the freed stack keeps its contents for a while. That
// the walk follows the move rests on fp being an unsafe.Pointer, which the
// runtime adjusts when it copies the stack.)
func TestStackMovesDuringWalk(t *testing.T) {
	if !Supported {
		t.Skipf("no frame pointers on %s", runtime.GOARCH)
	}
	fills, moves := 0, 0
	setFillHook(func() {
		fills++
		var here byte
		before := uintptr(unsafe.Pointer(&here))
		_ = bigFrames(64) // > 32 KiB of frames: the stack is copied
		if uintptr(unsafe.Pointer(&here)) != before {
			moves++
		}
	})
	defer setFillHook(nil)
	err := inGoroutine(func() error {
		resetCache()
		return recurseInlined(40, func() error { return here(4) })
	})
	if err != nil {
		t.Fatal(err)
	}
	if moves == 0 {
		t.Fatal("the stack never moved during a walk")
	}
	if fills == 0 {
		t.Fatal("the cache was not filled during the walk")
	}
	t.Logf("%d cache fills, %d of them moved the stack", fills, moves)
}

// TestCallersUnderGC captures from several goroutines while the garbage
// collector runs and shrinks stacks, with a fresh cache.
func TestCallersUnderGC(t *testing.T) {
	resetCache()
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				runtime.GC()
			}
		}
	}()
	defer close(stop)
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func() {
			for i := 0; i < 30; i++ {
				_ = bigFrames(i * 4) // grow, then shrink at the next GC
				if err := recurseInlined(1+i, func() error { return here(1) }); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for g := 0; g < 4; g++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
