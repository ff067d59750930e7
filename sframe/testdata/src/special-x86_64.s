# Hand-written functions whose CFI exercises the corners of SFrame:
# signal frames, an undefined return address, DRAP stack realignment,
# 2-byte FRE start offsets, 2- and 4-byte data words, and a return address
# kept in a register.
	.text
	.globl	plain
	.type	plain, @function
plain:
	.cfi_startproc
	pushq	%rbp
	.cfi_def_cfa_offset 16
	.cfi_offset 6, -16
	movq	%rsp, %rbp
	.cfi_def_cfa_register 6
	call	external@PLT
	popq	%rbp
	.cfi_def_cfa 7, 8
	ret
	.cfi_endproc
	.size	plain, .-plain

	.globl	trampoline
	.type	trampoline, @function
	nop
trampoline:
	.cfi_startproc
	.cfi_signal_frame
	.cfi_def_cfa_offset 160
	movq	$15, %rax
	syscall
	.cfi_endproc
	.size	trampoline, .-trampoline

	.globl	start
	.type	start, @function
start:
	.cfi_startproc
	.cfi_undefined rip
	xorl	%ebp, %ebp
	call	plain
	hlt
	.cfi_endproc
	.size	start, .-start

	.globl	drap
	.type	drap, @function
drap:
	.cfi_startproc
	leaq	8(%rsp), %r10
	.cfi_def_cfa 10, 0
	andq	$-64, %rsp
	pushq	-8(%r10)
	pushq	%rbp
	movq	%rsp, %rbp
	.cfi_escape 0x10,0x6,0x2,0x76,0
	pushq	%r10
	.cfi_escape 0xf,0x3,0x76,0x78,0x6
	call	plain
	popq	%r10
	.cfi_def_cfa 10, 0
	popq	%rbp
	leaq	-8(%r10), %rsp
	.cfi_def_cfa 7, 8
	ret
	.cfi_endproc
	.size	drap, .-drap

	.globl	bigframe
	.type	bigframe, @function
bigframe:
	.cfi_startproc
	subq	$40000, %rsp
	.cfi_def_cfa_offset 40008
	.skip	300, 0x90
	subq	$100000, %rsp
	.cfi_def_cfa_offset 140008
	.skip	700, 0x90
	addq	$140000, %rsp
	.cfi_def_cfa_offset 8
	ret
	.cfi_endproc
	.size	bigframe, .-bigframe

	.globl	rareg
	.type	rareg, @function
rareg:
	.cfi_startproc
	popq	%r11
	.cfi_def_cfa_offset 0
	.cfi_register rip, r11
	pushq	%r11
	.cfi_def_cfa_offset 8
	.cfi_offset rip, -8
	ret
	.cfi_endproc
	.size	rareg, .-rareg
	.section	.note.GNU-stack,"",@progbits
