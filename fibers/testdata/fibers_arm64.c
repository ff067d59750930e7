/* fibers_arm64.c: a parked ucontext fiber and a parked jmp_buf fiber, for
 * fibers' aarch64 test: run under qemu-aarch64, it prints
 * "fiber KIND ADDR" for each, then aborts, so qemu writes the guest's core. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

#define NOINLINE __attribute__((noinline))
#define BARRIER() __asm__ volatile("" ::: "memory")

static char uc_stack[64 << 10], jb_stack[64 << 10];
static ucontext_t main_uc, fiber_uc, jb_uc, back;
static jmp_buf main_jb, fiber_jb;

NOINLINE void uc_park(void) { swapcontext(&fiber_uc, &main_uc); abort(); }
NOINLINE void uc_b(void) { uc_park(); BARRIER(); }
NOINLINE void uc_a(void) { uc_b(); BARRIER(); }

NOINLINE void jb_park(void) { if (setjmp(fiber_jb) == 0) longjmp(main_jb, 1); abort(); }
NOINLINE void jb_b(void) { jb_park(); BARRIER(); }
NOINLINE void jb_a(void) { jb_b(); BARRIER(); }

int main(void) {
	getcontext(&fiber_uc);
	fiber_uc.uc_stack.ss_sp = uc_stack;
	fiber_uc.uc_stack.ss_size = sizeof uc_stack;
	makecontext(&fiber_uc, uc_a, 0);
	swapcontext(&main_uc, &fiber_uc);

	getcontext(&jb_uc);
	jb_uc.uc_stack.ss_sp = jb_stack;
	jb_uc.uc_stack.ss_size = sizeof jb_stack;
	makecontext(&jb_uc, jb_a, 0);
	if (setjmp(main_jb) == 0) swapcontext(&back, &jb_uc);

	printf("fiber ucontext %p\nfiber jmpbuf %p\n", (void *)&fiber_uc, (void *)&fiber_jb);
	fflush(stdout);
	abort();
}
