// Part of rewind, package gostack.

#include "textflag.h"

// func getfp() uintptr
//
// getfp returns the value of the frame pointer register (R29). It has no
// frame of its own, so the value is the frame pointer of whoever called it.
// When Go code calls it through the compiler's ABI wrapper, that is the
// wrapper's frame; gostack measures this once at start-up (see fpOK).
TEXT ·getfp(SB),NOSPLIT|NOFRAME,$0-8
	MOVD	R29, ret+0(FP)
	RET
