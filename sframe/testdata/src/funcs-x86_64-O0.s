	.file	"funcs.c"
	.text
	.globl	leaf
	.type	leaf, @function
leaf:
.LFB6:
	.cfi_startproc
	pushq	%rbp
	.cfi_def_cfa_offset 16
	.cfi_offset 6, -16
	movq	%rsp, %rbp
	.cfi_def_cfa_register 6
	movl	%edi, -4(%rbp)
	movl	-4(%rbp), %edx
	movl	%edx, %eax
	addl	%eax, %eax
	addl	%edx, %eax
	addl	$1, %eax
	popq	%rbp
	.cfi_def_cfa 7, 8
	ret
	.cfi_endproc
.LFE6:
	.size	leaf, .-leaf
	.globl	caller
	.type	caller, @function
caller:
.LFB7:
	.cfi_startproc
	pushq	%rbp
	.cfi_def_cfa_offset 16
	.cfi_offset 6, -16
	movq	%rsp, %rbp
	.cfi_def_cfa_register 6
	subq	$16, %rsp
	movl	%edi, -4(%rbp)
	movl	-4(%rbp), %eax
	movl	%eax, %edi
	call	leaf
	movl	%eax, %edi
	call	ext_sink@PLT
	addl	$1, %eax
	leave
	.cfi_def_cfa 7, 8
	ret
	.cfi_endproc
.LFE7:
	.size	caller, .-caller
	.globl	dynamic
	.type	dynamic, @function
dynamic:
.LFB8:
	.cfi_startproc
	pushq	%rbp
	.cfi_def_cfa_offset 16
	.cfi_offset 6, -16
	movq	%rsp, %rbp
	.cfi_def_cfa_register 6
	subq	$32, %rsp
	movl	%edi, -20(%rbp)
	movl	-20(%rbp), %eax
	addl	$1, %eax
	cltq
	leaq	8(%rax), %rdx
	movl	$16, %eax
	subq	$1, %rax
	addq	%rdx, %rax
	movl	$16, %esi
	movl	$0, %edx
	divq	%rsi
	imulq	$16, %rax, %rax
	subq	%rax, %rsp
	movq	%rsp, %rax
	addq	$15, %rax
	shrq	$4, %rax
	salq	$4, %rax
	movq	%rax, -8(%rbp)
	movl	-20(%rbp), %eax
	addl	$1, %eax
	movslq	%eax, %rdx
	movl	-20(%rbp), %ecx
	movq	-8(%rbp), %rax
	movl	%ecx, %esi
	movq	%rax, %rdi
	call	memset@PLT
	movl	-20(%rbp), %eax
	movl	%eax, %edx
	shrl	$31, %edx
	addl	%edx, %eax
	sarl	%eax
	movslq	%eax, %rdx
	movq	-8(%rbp), %rax
	addq	%rdx, %rax
	movzbl	(%rax), %eax
	movsbl	%al, %eax
	movl	%eax, %edi
	call	ext_sink@PLT
	leave
	.cfi_def_cfa 7, 8
	ret
	.cfi_endproc
.LFE8:
	.size	dynamic, .-dynamic
	.globl	die
	.type	die, @function
die:
.LFB9:
	.cfi_startproc
	pushq	%rbp
	.cfi_def_cfa_offset 16
	.cfi_offset 6, -16
	movq	%rsp, %rbp
	.cfi_def_cfa_register 6
	subq	$16, %rsp
	movl	%edi, -4(%rbp)
	movl	-4(%rbp), %eax
	movl	%eax, %edi
	call	ext_sink@PLT
	call	abort@PLT
	.cfi_endproc
.LFE9:
	.size	die, .-die
	.globl	many_args
	.type	many_args, @function
many_args:
.LFB10:
	.cfi_startproc
	pushq	%rbp
	.cfi_def_cfa_offset 16
	.cfi_offset 6, -16
	movq	%rsp, %rbp
	.cfi_def_cfa_register 6
	subq	$304, %rsp
	movl	%edi, -276(%rbp)
	movl	%esi, -280(%rbp)
	movl	%edx, -284(%rbp)
	movl	%ecx, -288(%rbp)
	movl	%r8d, -292(%rbp)
	movl	%r9d, -296(%rbp)
	movl	$0, -4(%rbp)
	jmp	.L9
.L10:
	movl	-276(%rbp), %edx
	movl	-280(%rbp), %eax
	addl	%eax, %edx
	movl	-284(%rbp), %eax
	addl	%eax, %edx
	movl	-288(%rbp), %eax
	addl	%eax, %edx
	movl	-292(%rbp), %eax
	addl	%eax, %edx
	movl	-296(%rbp), %eax
	addl	%eax, %edx
	movl	16(%rbp), %eax
	addl	%eax, %edx
	movl	24(%rbp), %eax
	addl	%eax, %edx
	movl	32(%rbp), %eax
	addl	%eax, %edx
	movl	-4(%rbp), %eax
	addl	%edx, %eax
	movl	%eax, %edi
	call	ext_sink@PLT
	movl	-4(%rbp), %edx
	movslq	%edx, %rdx
	movl	%eax, -272(%rbp,%rdx,4)
	addl	$1, -4(%rbp)
.L9:
	cmpl	$63, -4(%rbp)
	jle	.L10
	movl	-276(%rbp), %eax
	andl	$63, %eax
	cltq
	movl	-272(%rbp,%rax,4), %edx
	movl	-280(%rbp), %eax
	andl	$63, %eax
	cltq
	movl	-272(%rbp,%rax,4), %eax
	addl	%edx, %eax
	leave
	.cfi_def_cfa 7, 8
	ret
	.cfi_endproc
.LFE10:
	.size	many_args, .-many_args
	.ident	"GCC: (Debian 12.2.0-14+deb12u1) 12.2.0"
	.section	.note.GNU-stack,"",@progbits
