	.file	"funcs.c"
	.text
	.p2align 4
	.globl	leaf
	.type	leaf, @function
leaf:
.LFB11:
	.cfi_startproc
	leal	1(%rdi,%rdi,2), %eax
	ret
	.cfi_endproc
.LFE11:
	.size	leaf, .-leaf
	.p2align 4
	.globl	caller
	.type	caller, @function
caller:
.LFB12:
	.cfi_startproc
	subq	$8, %rsp
	.cfi_def_cfa_offset 16
	leal	1(%rdi,%rdi,2), %edi
	call	ext_sink@PLT
	addq	$8, %rsp
	.cfi_def_cfa_offset 8
	addl	$1, %eax
	ret
	.cfi_endproc
.LFE12:
	.size	caller, .-caller
	.p2align 4
	.globl	dynamic
	.type	dynamic, @function
dynamic:
.LFB13:
	.cfi_startproc
	pushq	%rbp
	.cfi_def_cfa_offset 16
	.cfi_offset 6, -16
	leal	1(%rdi), %edx
	movl	%edi, %esi
	movslq	%edx, %rdx
	leaq	23(%rdx), %rax
	movq	%rsp, %rbp
	.cfi_def_cfa_register 6
	pushq	%rbx
	andq	$-16, %rax
	.cfi_offset 3, -24
	movl	%edi, %ebx
	subq	$8, %rsp
	subq	%rax, %rsp
	leaq	15(%rsp), %rcx
	andq	$-16, %rcx
	movq	%rcx, %rdi
	call	memset@PLT
	movq	%rax, %rcx
	movl	%ebx, %eax
	shrl	$31, %eax
	addl	%ebx, %eax
	sarl	%eax
	cltq
	movsbl	(%rcx,%rax), %edi
	call	ext_sink@PLT
	movq	-8(%rbp), %rbx
	leave
	.cfi_def_cfa 7, 8
	ret
	.cfi_endproc
.LFE13:
	.size	dynamic, .-dynamic
	.p2align 4
	.globl	die
	.type	die, @function
die:
.LFB14:
	.cfi_startproc
	subq	$8, %rsp
	.cfi_def_cfa_offset 16
	call	ext_sink@PLT
	call	abort@PLT
	.cfi_endproc
.LFE14:
	.size	die, .-die
	.p2align 4
	.globl	many_args
	.type	many_args, @function
many_args:
.LFB15:
	.cfi_startproc
	pushq	%r14
	.cfi_def_cfa_offset 16
	.cfi_offset 14, -16
	leal	(%rdi,%rsi), %eax
	pushq	%r13
	.cfi_def_cfa_offset 24
	.cfi_offset 13, -24
	addl	%edx, %eax
	movl	%esi, %r13d
	pushq	%r12
	.cfi_def_cfa_offset 32
	.cfi_offset 12, -32
	addl	%ecx, %eax
	movl	%edi, %r12d
	pushq	%rbp
	.cfi_def_cfa_offset 40
	.cfi_offset 6, -40
	addl	%r8d, %eax
	pushq	%rbx
	.cfi_def_cfa_offset 48
	.cfi_offset 3, -48
	leal	(%rax,%r9), %ebp
	subq	$256, %rsp
	.cfi_def_cfa_offset 304
	addl	304(%rsp), %ebp
	movq	%rsp, %rbx
	addl	312(%rsp), %ebp
	leaq	256(%rsp), %r14
	addl	320(%rsp), %ebp
	.p2align 4,,10
	.p2align 3
.L10:
	movl	%ebp, %edi
	addq	$4, %rbx
	addl	$1, %ebp
	call	ext_sink@PLT
	movl	%eax, -4(%rbx)
	cmpq	%r14, %rbx
	jne	.L10
	andl	$63, %r12d
	andl	$63, %r13d
	movl	(%rsp,%r13,4), %eax
	addl	(%rsp,%r12,4), %eax
	addq	$256, %rsp
	.cfi_def_cfa_offset 48
	popq	%rbx
	.cfi_def_cfa_offset 40
	popq	%rbp
	.cfi_def_cfa_offset 32
	popq	%r12
	.cfi_def_cfa_offset 24
	popq	%r13
	.cfi_def_cfa_offset 16
	popq	%r14
	.cfi_def_cfa_offset 8
	ret
	.cfi_endproc
.LFE15:
	.size	many_args, .-many_args
	.ident	"GCC: (Debian 12.2.0-14+deb12u1) 12.2.0"
	.section	.note.GNU-stack,"",@progbits
