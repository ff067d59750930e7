#include "textflag.h"

// func lines(p *byte, n int)
TEXT ·lines(SB), NOSPLIT, $0-16
	MOVQ	p+0(FP), AX
	MOVQ	n+8(FP), CX
loop:
	CMPQ	CX, $0
	JLE	done
	PREFETCHT0	(AX)
	ADDQ	$64, AX
	SUBQ	$64, CX
	JMP	loop
done:
	RET
