	.arch armv8-a
	.file	"funcs.c"
	.text
	.align	2
	.p2align 4,,11
	.global	leaf
	.type	leaf, %function
leaf:
.LFB11:
	.cfi_startproc
	add	w0, w0, w0, lsl 1
	add	w0, w0, 1
	ret
	.cfi_endproc
.LFE11:
	.size	leaf, .-leaf
	.align	2
	.p2align 4,,11
	.global	caller
	.type	caller, %function
caller:
.LFB12:
	.cfi_startproc
	hint	25 // paciasp
	.cfi_window_save
	stp	x29, x30, [sp, -16]!
	.cfi_def_cfa_offset 16
	.cfi_offset 29, -16
	.cfi_offset 30, -8
	add	w0, w0, w0, lsl 1
	mov	x29, sp
	add	w0, w0, 1
	bl	ext_sink
	ldp	x29, x30, [sp], 16
	.cfi_restore 30
	.cfi_restore 29
	.cfi_def_cfa_offset 0
	hint	29 // autiasp
	.cfi_window_save
	add	w0, w0, 1
	ret
	.cfi_endproc
.LFE12:
	.size	caller, .-caller
	.align	2
	.p2align 4,,11
	.global	dynamic
	.type	dynamic, %function
dynamic:
.LFB13:
	.cfi_startproc
	hint	25 // paciasp
	.cfi_window_save
	stp	x29, x30, [sp, -32]!
	.cfi_def_cfa_offset 32
	.cfi_offset 29, -32
	.cfi_offset 30, -24
	add	w2, w0, 1
	mov	x29, sp
	.cfi_def_cfa_register 29
	sxtw	x2, w2
	str	x19, [sp, 16]
	.cfi_offset 19, -16
	mov	w19, w0
	mov	w1, w0
	add	x0, x2, 15
	and	x0, x0, -16
	add	w19, w19, w19, lsr 31
	sub	sp, sp, x0
	mov	x3, sp
	asr	w19, w19, 1
	mov	x0, x3
	bl	memset
	ldrb	w0, [x0, w19, sxtw]
	bl	ext_sink
	mov	sp, x29
	ldr	x19, [sp, 16]
	ldp	x29, x30, [sp], 32
	.cfi_restore 30
	.cfi_restore 29
	.cfi_restore 19
	.cfi_def_cfa 31, 0
	hint	29 // autiasp
	.cfi_window_save
	ret
	.cfi_endproc
.LFE13:
	.size	dynamic, .-dynamic
	.align	2
	.p2align 4,,11
	.global	die
	.type	die, %function
die:
.LFB14:
	.cfi_startproc
	hint	25 // paciasp
	.cfi_window_save
	stp	x29, x30, [sp, -16]!
	.cfi_def_cfa_offset 16
	.cfi_offset 29, -16
	.cfi_offset 30, -8
	mov	x29, sp
	bl	ext_sink
	bl	abort
	.cfi_endproc
.LFE14:
	.size	die, .-die
	.align	2
	.p2align 4,,11
	.global	many_args
	.type	many_args, %function
many_args:
.LFB15:
	.cfi_startproc
	add	w8, w0, w1
	hint	25 // paciasp
	.cfi_window_save
	add	w8, w8, w2
	stp	x29, x30, [sp, -320]!
	.cfi_def_cfa_offset 320
	.cfi_offset 29, -320
	.cfi_offset 30, -312
	add	w8, w8, w3
	add	w8, w8, w4
	mov	x29, sp
	add	w8, w8, w5
	add	w8, w8, w6
	stp	x21, x22, [sp, 32]
	.cfi_offset 21, -288
	.cfi_offset 22, -280
	mov	w21, w0
	ldr	w0, [sp, 320]
	add	w8, w8, w7
	stp	x23, x24, [sp, 48]
	.cfi_offset 23, -272
	.cfi_offset 24, -264
	add	x24, sp, 64
	mov	x22, x24
	add	x23, sp, 320
	stp	x19, x20, [sp, 16]
	.cfi_offset 19, -304
	.cfi_offset 20, -296
	mov	w20, w1
	add	w19, w8, w0
	.p2align 3,,7
.L10:
	mov	w0, w19
	bl	ext_sink
	str	w0, [x22], 4
	add	w19, w19, 1
	cmp	x22, x23
	bne	.L10
	and	x21, x21, 63
	and	x20, x20, 63
	ldr	w1, [x24, x21, lsl 2]
	ldr	w0, [x24, x20, lsl 2]
	ldp	x19, x20, [sp, 16]
	add	w0, w1, w0
	ldp	x21, x22, [sp, 32]
	ldp	x23, x24, [sp, 48]
	ldp	x29, x30, [sp], 320
	.cfi_restore 30
	.cfi_restore 29
	.cfi_restore 23
	.cfi_restore 24
	.cfi_restore 21
	.cfi_restore 22
	.cfi_restore 19
	.cfi_restore 20
	.cfi_def_cfa_offset 0
	hint	29 // autiasp
	.cfi_window_save
	ret
	.cfi_endproc
.LFE15:
	.size	many_args, .-many_args
	.align	2
	.p2align 4,,11
	.global	signed_b
	.type	signed_b, %function
signed_b:
.LFB16:
	.cfi_startproc
	.cfi_b_key_frame
	hint	27 // pacibsp
	.cfi_window_save
	stp	x29, x30, [sp, -16]!
	.cfi_def_cfa_offset 16
	.cfi_offset 29, -16
	.cfi_offset 30, -8
	mov	x29, sp
	bl	ext_sink
	add	w0, w0, 2
	ldp	x29, x30, [sp], 16
	.cfi_restore 30
	.cfi_restore 29
	.cfi_def_cfa_offset 0
	hint	31 // autibsp
	.cfi_window_save
	ret
	.cfi_endproc
.LFE16:
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
