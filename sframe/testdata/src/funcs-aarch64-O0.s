	.arch armv8-a
	.file	"funcs.c"
	.text
	.align	2
	.global	leaf
	.type	leaf, %function
leaf:
.LFB6:
	.cfi_startproc
	sub	sp, sp, #16
	.cfi_def_cfa_offset 16
	str	w0, [sp, 12]
	ldr	w1, [sp, 12]
	mov	w0, w1
	lsl	w0, w0, 1
	add	w0, w0, w1
	add	w0, w0, 1
	add	sp, sp, 16
	.cfi_def_cfa_offset 0
	ret
	.cfi_endproc
.LFE6:
	.size	leaf, .-leaf
	.align	2
	.global	caller
	.type	caller, %function
caller:
.LFB7:
	.cfi_startproc
	hint	25 // paciasp
	.cfi_window_save
	stp	x29, x30, [sp, -32]!
	.cfi_def_cfa_offset 32
	.cfi_offset 29, -32
	.cfi_offset 30, -24
	mov	x29, sp
	str	w0, [sp, 28]
	ldr	w0, [sp, 28]
	bl	leaf
	bl	ext_sink
	add	w0, w0, 1
	ldp	x29, x30, [sp], 32
	.cfi_restore 30
	.cfi_restore 29
	.cfi_def_cfa_offset 0
	hint	29 // autiasp
	.cfi_window_save
	ret
	.cfi_endproc
.LFE7:
	.size	caller, .-caller
	.align	2
	.global	dynamic
	.type	dynamic, %function
dynamic:
.LFB8:
	.cfi_startproc
	hint	25 // paciasp
	.cfi_window_save
	stp	x29, x30, [sp, -48]!
	.cfi_def_cfa_offset 48
	.cfi_offset 29, -48
	.cfi_offset 30, -40
	mov	x29, sp
	.cfi_def_cfa_register 29
	str	w0, [x29, 28]
	ldr	w0, [x29, 28]
	add	w0, w0, 1
	sxtw	x0, w0
	add	x0, x0, 15
	lsr	x0, x0, 4
	lsl	x0, x0, 4
	sub	sp, sp, x0
	mov	x0, sp
	add	x0, x0, 15
	lsr	x0, x0, 4
	lsl	x0, x0, 4
	str	x0, [x29, 40]
	ldr	w0, [x29, 28]
	add	w0, w0, 1
	sxtw	x0, w0
	mov	x2, x0
	ldr	w1, [x29, 28]
	ldr	x0, [x29, 40]
	bl	memset
	ldr	w0, [x29, 28]
	lsr	w1, w0, 31
	add	w0, w1, w0
	asr	w0, w0, 1
	sxtw	x0, w0
	ldr	x1, [x29, 40]
	add	x0, x1, x0
	ldrb	w0, [x0]
	bl	ext_sink
	mov	sp, x29
	ldp	x29, x30, [sp], 48
	.cfi_restore 30
	.cfi_restore 29
	.cfi_def_cfa 31, 0
	hint	29 // autiasp
	.cfi_window_save
	ret
	.cfi_endproc
.LFE8:
	.size	dynamic, .-dynamic
	.align	2
	.global	die
	.type	die, %function
die:
.LFB9:
	.cfi_startproc
	hint	25 // paciasp
	.cfi_window_save
	stp	x29, x30, [sp, -32]!
	.cfi_def_cfa_offset 32
	.cfi_offset 29, -32
	.cfi_offset 30, -24
	mov	x29, sp
	str	w0, [sp, 28]
	ldr	w0, [sp, 28]
	bl	ext_sink
	bl	abort
	.cfi_endproc
.LFE9:
	.size	die, .-die
	.align	2
	.global	many_args
	.type	many_args, %function
many_args:
.LFB10:
	.cfi_startproc
	hint	25 // paciasp
	.cfi_window_save
	stp	x29, x30, [sp, -320]!
	.cfi_def_cfa_offset 320
	.cfi_offset 29, -320
	.cfi_offset 30, -312
	mov	x29, sp
	str	w0, [sp, 44]
	str	w1, [sp, 40]
	str	w2, [sp, 36]
	str	w3, [sp, 32]
	str	w4, [sp, 28]
	str	w5, [sp, 24]
	str	w6, [sp, 20]
	str	w7, [sp, 16]
	str	wzr, [sp, 316]
	b	.L9
.L10:
	ldr	w1, [sp, 44]
	ldr	w0, [sp, 40]
	add	w1, w1, w0
	ldr	w0, [sp, 36]
	add	w1, w1, w0
	ldr	w0, [sp, 32]
	add	w1, w1, w0
	ldr	w0, [sp, 28]
	add	w1, w1, w0
	ldr	w0, [sp, 24]
	add	w1, w1, w0
	ldr	w0, [sp, 20]
	add	w1, w1, w0
	ldr	w0, [sp, 16]
	add	w1, w1, w0
	ldr	w0, [sp, 320]
	add	w1, w1, w0
	ldr	w0, [sp, 316]
	add	w0, w1, w0
	bl	ext_sink
	mov	w2, w0
	ldrsw	x0, [sp, 316]
	lsl	x0, x0, 2
	add	x1, sp, 56
	str	w2, [x1, x0]
	ldr	w0, [sp, 316]
	add	w0, w0, 1
	str	w0, [sp, 316]
.L9:
	ldr	w0, [sp, 316]
	cmp	w0, 63
	ble	.L10
	ldr	w0, [sp, 44]
	and	w0, w0, 63
	sxtw	x0, w0
	lsl	x0, x0, 2
	add	x1, sp, 56
	ldr	w1, [x1, x0]
	ldr	w0, [sp, 40]
	and	w0, w0, 63
	sxtw	x0, w0
	lsl	x0, x0, 2
	add	x2, sp, 56
	ldr	w0, [x2, x0]
	add	w0, w1, w0
	ldp	x29, x30, [sp], 320
	.cfi_restore 30
	.cfi_restore 29
	.cfi_def_cfa_offset 0
	hint	29 // autiasp
	.cfi_window_save
	ret
	.cfi_endproc
.LFE10:
	.size	many_args, .-many_args
	.align	2
	.global	signed_b
	.type	signed_b, %function
signed_b:
.LFB11:
	.cfi_startproc
	.cfi_b_key_frame
	hint	27 // pacibsp
	.cfi_window_save
	stp	x29, x30, [sp, -32]!
	.cfi_def_cfa_offset 32
	.cfi_offset 29, -32
	.cfi_offset 30, -24
	mov	x29, sp
	str	w0, [sp, 28]
	ldr	w0, [sp, 28]
	bl	ext_sink
	add	w0, w0, 2
	ldp	x29, x30, [sp], 32
	.cfi_restore 30
	.cfi_restore 29
	.cfi_def_cfa_offset 0
	hint	31 // autibsp
	.cfi_window_save
	ret
	.cfi_endproc
.LFE11:
	.size	signed_b, .-signed_b
	.ident	"GCC: (Debian 12.2.0-14) 12.2.0"
	.section	.note.GNU-stack,"",@progbits
	.section	.note.gnu.property,"a"
	.align	3
	.word	4
	.word	16
	.word	5
	.string	"GNU"
	.word	3221225472
	.word	4
	.word	2
	.align	3
