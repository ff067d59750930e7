// Part of rewind, scripts/shadowcheck.

//go:build rewind_shadow

#include "textflag.h"

// func callerFP() unsafe.Pointer: R29 as the caller left it (no frame here).
TEXT ·callerFP(SB),NOSPLIT|NOFRAME,$0-8
	MOVD	R29, ret+0(FP)
	RET
