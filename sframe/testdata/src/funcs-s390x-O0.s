	.file	"funcs.c"
	.machinemode zarch
	.machine "z196"
.text
	.align	8
.globl leaf
	.type	leaf, @function
leaf:
.LFB6:
	.cfi_startproc
	ldgr	%f2,%r11
	.cfi_register 11, 17
	ldgr	%f0,%r15
	.cfi_register 15, 16
	lay	%r15,-168(%r15)
	.cfi_def_cfa_offset 328
	lgr	%r11,%r15
	.cfi_def_cfa_register 11
	lgr	%r1,%r2
	st	%r1,164(%r11)
	l	%r2,164(%r11)
	lr	%r1,%r2
	sll	%r1,1
	ar	%r1,%r2
	ahi	%r1,1
	lgfr	%r1,%r1
	lgr	%r2,%r1
	lgdr	%r15,%f0
	.cfi_restore 15
	.cfi_def_cfa 15, 160
	lgdr	%r11,%f2
	.cfi_restore 11
	br	%r14
	.cfi_endproc
.LFE6:
	.size	leaf, .-leaf
	.align	8
.globl caller
	.type	caller, @function
caller:
.LFB7:
	.cfi_startproc
	stmg	%r11,%r15,88(%r15)
	.cfi_offset 11, -72
	.cfi_offset 12, -64
	.cfi_offset 13, -56
	.cfi_offset 14, -48
	.cfi_offset 15, -40
	lay	%r15,-168(%r15)
	.cfi_def_cfa_offset 328
	lgr	%r11,%r15
	.cfi_def_cfa_register 11
	lgr	%r1,%r2
	st	%r1,164(%r11)
	lgf	%r1,164(%r11)
	lgr	%r2,%r1
	brasl	%r14,leaf@PLT
	lgr	%r1,%r2
	lgfr	%r1,%r1
	lgr	%r2,%r1
	brasl	%r14,ext_sink@PLT
	lgr	%r1,%r2
	ahi	%r1,1
	lgfr	%r1,%r1
	lgr	%r2,%r1
	lmg	%r11,%r15,256(%r11)
	.cfi_restore 15
	.cfi_restore 14
	.cfi_restore 13
	.cfi_restore 12
	.cfi_restore 11
	.cfi_def_cfa 15, 160
	br	%r14
	.cfi_endproc
.LFE7:
	.size	caller, .-caller
	.align	8
.globl dynamic
	.type	dynamic, @function
dynamic:
.LFB8:
	.cfi_startproc
	stmg	%r11,%r15,88(%r15)
	.cfi_offset 11, -72
	.cfi_offset 12, -64
	.cfi_offset 13, -56
	.cfi_offset 14, -48
	.cfi_offset 15, -40
	lay	%r15,-176(%r15)
	.cfi_def_cfa_offset 336
	lgr	%r11,%r15
	.cfi_def_cfa_register 11
	lgr	%r1,%r2
	st	%r1,164(%r11)
	l	%r1,164(%r11)
	ahi	%r1,1
	lgfr	%r1,%r1
	aghi	%r1,7
	srlg	%r1,%r1,3
	sllg	%r1,%r1,3
	sgr	%r15,%r1
	aghik	%r1,%r15,160
	aghi	%r1,7
	srlg	%r1,%r1,3
	sllg	%r1,%r1,3
	stg	%r1,168(%r11)
	l	%r1,164(%r11)
	ahi	%r1,1
	lgfr	%r2,%r1
	lgf	%r1,164(%r11)
	lgr	%r4,%r2
	lgr	%r3,%r1
	lg	%r2,168(%r11)
	brasl	%r14,memset@PLT
	l	%r1,164(%r11)
	srlk	%r2,%r1,31
	ar	%r1,%r2
	sra	%r1,1
	lgfr	%r1,%r1
	ag	%r1,168(%r11)
	ic	%r1,0(%r1)
	llcr	%r1,%r1
	lgfr	%r1,%r1
	lgr	%r2,%r1
	brasl	%r14,ext_sink@PLT
	lgr	%r1,%r2
	lgfr	%r1,%r1
	lgr	%r2,%r1
	lmg	%r11,%r15,264(%r11)
	.cfi_restore 15
	.cfi_restore 14
	.cfi_restore 13
	.cfi_restore 12
	.cfi_restore 11
	.cfi_def_cfa 15, 160
	br	%r14
	.cfi_endproc
.LFE8:
	.size	dynamic, .-dynamic
	.align	8
.globl die
	.type	die, @function
die:
.LFB9:
	.cfi_startproc
	stmg	%r11,%r15,88(%r15)
	.cfi_offset 11, -72
	.cfi_offset 12, -64
	.cfi_offset 13, -56
	.cfi_offset 14, -48
	.cfi_offset 15, -40
	lay	%r15,-168(%r15)
	.cfi_def_cfa_offset 328
	lgr	%r11,%r15
	.cfi_def_cfa_register 11
	lgr	%r1,%r2
	st	%r1,164(%r11)
	lgf	%r1,164(%r11)
	lgr	%r2,%r1
	brasl	%r14,ext_sink@PLT
	brasl	%r14,abort@PLT
	.cfi_endproc
.LFE9:
	.size	die, .-die
	.align	8
.globl many_args
	.type	many_args, @function
many_args:
.LFB10:
	.cfi_startproc
	stmg	%r11,%r15,88(%r15)
	.cfi_offset 11, -72
	.cfi_offset 12, -64
	.cfi_offset 13, -56
	.cfi_offset 14, -48
	.cfi_offset 15, -40
	lay	%r15,-448(%r15)
	.cfi_def_cfa_offset 608
	lgr	%r11,%r15
	.cfi_def_cfa_register 11
	lgr	%r1,%r2
	lgr	%r0,%r3
	lgr	%r3,%r5
	lgr	%r2,%r6
	st	%r1,180(%r11)
	lr	%r1,%r0
	st	%r1,176(%r11)
	lr	%r1,%r4
	st	%r1,172(%r11)
	lr	%r1,%r3
	st	%r1,168(%r11)
	lr	%r1,%r2
	st	%r1,164(%r11)
	mvhi	444(%r11),0
	j	.L13
.L14:
	l	%r1,180(%r11)
	a	%r1,176(%r11)
	a	%r1,172(%r11)
	a	%r1,168(%r11)
	a	%r1,164(%r11)
	a	%r1,612(%r11)
	a	%r1,620(%r11)
	a	%r1,628(%r11)
	a	%r1,636(%r11)
	a	%r1,444(%r11)
	lgfr	%r1,%r1
	lgr	%r2,%r1
	brasl	%r14,ext_sink@PLT
	lgr	%r1,%r2
	lr	%r2,%r1
	lgf	%r1,444(%r11)
	sllg	%r1,%r1,2
	st	%r2,188(%r1,%r11)
	asi	444(%r11),1
.L13:
	l	%r1,444(%r11)
	chi	%r1,63
	jle	.L14
	l	%r1,180(%r11)
	nilf	%r1,63
	lgfr	%r1,%r1
	sllg	%r1,%r1,2
	l	%r2,188(%r1,%r11)
	l	%r1,176(%r11)
	nilf	%r1,63
	lgfr	%r1,%r1
	sllg	%r1,%r1,2
	l	%r1,188(%r1,%r11)
	ar	%r1,%r2
	lgfr	%r1,%r1
	lgr	%r2,%r1
	lmg	%r11,%r15,536(%r11)
	.cfi_restore 15
	.cfi_restore 14
	.cfi_restore 13
	.cfi_restore 12
	.cfi_restore 11
	.cfi_def_cfa 15, 160
	br	%r14
	.cfi_endproc
.LFE10:
	.size	many_args, .-many_args
	.ident	"GCC: (Debian 12.2.0-14) 12.2.0"
	.section	.note.GNU-stack,"",@progbits
