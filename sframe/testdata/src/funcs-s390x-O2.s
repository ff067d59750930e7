	.file	"funcs.c"
	.machinemode zarch
	.machine "z196"
.text
	.align	8
.globl leaf
	.type	leaf, @function
leaf:
.LFB11:
	.cfi_startproc
	sllk	%r1,%r2,1
	ar	%r2,%r1
	ahi	%r2,1
	lgfr	%r2,%r2
	br	%r14
	.cfi_endproc
.LFE11:
	.size	leaf, .-leaf
	.align	8
.globl caller
	.type	caller, @function
caller:
.LFB12:
	.cfi_startproc
	stmg	%r14,%r15,112(%r15)
	sllk	%r1,%r2,1
	.cfi_offset 14, -48
	.cfi_offset 15, -40
	lay	%r15,-160(%r15)
	.cfi_def_cfa_offset 320
	ar	%r2,%r1
	ahi	%r2,1
	lgfr	%r2,%r2
	brasl	%r14,ext_sink@PLT
	lmg	%r14,%r15,272(%r15)
	.cfi_restore 15
	.cfi_restore 14
	.cfi_def_cfa_offset 160
	ahi	%r2,1
	lgfr	%r2,%r2
	br	%r14
	.cfi_endproc
.LFE12:
	.size	caller, .-caller
	.align	8
.globl dynamic
	.type	dynamic, @function
dynamic:
.LFB13:
	.cfi_startproc
	stmg	%r11,%r15,88(%r15)
	ahik	%r3,%r2,1
	.cfi_offset 11, -72
	.cfi_offset 12, -64
	.cfi_offset 13, -56
	.cfi_offset 14, -48
	.cfi_offset 15, -40
	lay	%r15,-160(%r15)
	.cfi_def_cfa_offset 320
	lgfr	%r3,%r3
	lgr	%r11,%r15
	.cfi_def_cfa_register 11
	aghik	%r1,%r3,7
	nill	%r1,65528
	sgr	%r15,%r1
	la	%r5,160(%r15)
	ltgr	%r3,%r3
	je	.L10
	lgr	%r1,%r5
	cghi	%r3,1
	je	.L9
	aghi	%r3,-2
	srlg	%r4,%r3,8
	ltgr	%r4,%r4
	je	.L11
.L8:
	pfd	2,1024(%r1)
	stc	%r2,0(%r1)
	mvc	1(255,%r1),0(%r1)
	la	%r1,256(%r1)
	brctg	%r4,.L8
.L11:
	stc	%r2,0(%r1)
	exrl	%r3,.L20
.L10:
	srlk	%r1,%r2,31
	ar	%r1,%r2
	sra	%r1,1
	lgfr	%r1,%r1
	llgc	%r2,0(%r1,%r5)
	brasl	%r14,ext_sink@PLT
	lmg	%r11,%r15,248(%r11)
	.cfi_remember_state
	.cfi_restore 15
	.cfi_restore 14
	.cfi_restore 13
	.cfi_restore 12
	.cfi_restore 11
	.cfi_def_cfa 15, 160
	br	%r14
.L9:
	.cfi_restore_state
	stc	%r2,0(%r5)
	j	.L10
.L20:
	mvc	1(1,%r1),0(%r1)
	.cfi_endproc
.LFE13:
	.size	dynamic, .-dynamic
	.align	8
.globl die
	.type	die, @function
die:
.LFB14:
	.cfi_startproc
	stmg	%r14,%r15,112(%r15)
	.cfi_offset 14, -48
	.cfi_offset 15, -40
	lay	%r15,-160(%r15)
	.cfi_def_cfa_offset 320
	brasl	%r14,ext_sink@PLT
	brasl	%r14,abort@PLT
	.cfi_endproc
.LFE14:
	.size	die, .-die
	.align	8
.globl many_args
	.type	many_args, @function
many_args:
.LFB15:
	.cfi_startproc
	stmg	%r7,%r15,56(%r15)
	ark	%r1,%r2,%r3
	.cfi_offset 7, -104
	.cfi_offset 8, -96
	.cfi_offset 9, -88
	.cfi_offset 10, -80
	.cfi_offset 11, -72
	.cfi_offset 12, -64
	.cfi_offset 13, -56
	.cfi_offset 14, -48
	.cfi_offset 15, -40
	lay	%r15,-416(%r15)
	.cfi_def_cfa_offset 576
	ar	%r1,%r4
	lgr	%r9,%r2
	ar	%r1,%r5
	lgr	%r10,%r3
	ark	%r11,%r1,%r6
	la	%r8,160(%r15)
	a	%r11,580(%r15)
	lghi	%r7,64
	a	%r11,588(%r15)
	a	%r11,596(%r15)
	a	%r11,604(%r15)
.L27:
	lgfr	%r2,%r11
	aghi	%r8,4
	brasl	%r14,ext_sink@PLT
	sty	%r2,-4(%r8)
	ahi	%r11,1
	brctg	%r7,.L27
	risbg	%r9,%r9,56,128+61,2
	risbg	%r10,%r10,56,128+61,2
	l	%r2,160(%r9,%r15)
	a	%r2,160(%r10,%r15)
	lgfr	%r2,%r2
	lmg	%r7,%r15,472(%r15)
	.cfi_restore 15
	.cfi_restore 14
	.cfi_restore 13
	.cfi_restore 12
	.cfi_restore 11
	.cfi_restore 10
	.cfi_restore 9
	.cfi_restore 8
	.cfi_restore 7
	.cfi_def_cfa_offset 160
	br	%r14
	.cfi_endproc
.LFE15:
	.size	many_args, .-many_args
	.ident	"GCC: (Debian 12.2.0-14) 12.2.0"
	.section	.note.GNU-stack,"",@progbits
