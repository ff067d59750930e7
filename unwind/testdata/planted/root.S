/* middle ends with a call to a function that does not return, so the
   return address it pushes is the first byte of the next function,
   _start: the walk must still go on to _start. */
	.text
	.globl	crash
	.type	crash, @function
crash:
	.cfi_startproc
	ud2
	.cfi_endproc
	.size	crash, .-crash

	.globl	middle
	.type	middle, @function
middle:
	.cfi_startproc
	pushq	%rbp
	.cfi_def_cfa_offset 16
	.cfi_offset %rbp, -16
	movq	%rsp, %rbp
	.cfi_def_cfa_register %rbp
	call	crash
	.cfi_endproc
	.size	middle, .-middle

	.globl	_start
	.type	_start, @function
_start:
	.cfi_startproc
	.cfi_undefined %rip
	pushq	%rbp
	.cfi_def_cfa_offset 16
	.cfi_offset %rbp, -16
	movq	%rsp, %rbp
	.cfi_def_cfa_register %rbp
	call	middle
1:	jmp	1b
	.cfi_endproc
	.size	_start, .-_start
	.section	.note.GNU-stack,"",@progbits
