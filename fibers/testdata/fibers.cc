// fibers.cc: one parked fiber of every kind rewind reads from outside, for
// fibers' tests. Each fiber runs a chain of three functions of its own
// (KIND_a -> KIND_b -> KIND_park) and records backtrace() in KIND_park just
// before it switches away; main then prints, per fiber:
//
//	fiber KIND ADDR PC1 PC2 ...
//
// on stderr, where ADDR is what `rewind dump --fiber KIND@ADDR` takes and
// PCi are backtrace()'s return addresses from index 1 (the callers of
// KIND_park), then "ready" on stdout, and sleeps.
#include <boost/context/detail/fcontext.hpp>
#include <execinfo.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

namespace bctx = boost::context::detail;

#define NOINLINE __attribute__((noinline))
#define BARRIER() __asm__ volatile("" ::: "memory")

static void *trace[5][32];
static int ntrace[5];

static void *stack_alloc(size_t n) {
	void *p = mmap(0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (p == MAP_FAILED) abort();
	return p;
}

// ---- ucontext: swapcontext away from uc_park.
static ucontext_t main_uc, fiber_uc;
extern "C" NOINLINE void uc_park(void) {
	ntrace[0] = backtrace(trace[0], 32);
	swapcontext(&fiber_uc, &main_uc);
	abort();
}
extern "C" NOINLINE void uc_b(void) { uc_park(); BARRIER(); }
extern "C" NOINLINE void uc_a(void) { uc_b(); BARRIER(); }

// ---- jmpbuf: a coroutine on a ucontext stack parks with setjmp, then
// longjmps back to main.
static ucontext_t jb_uc;
static jmp_buf main_jb, fiber_jb;
extern "C" NOINLINE void jb_park(void) {
	ntrace[1] = backtrace(trace[1], 32);
	if (setjmp(fiber_jb) == 0) longjmp(main_jb, 1);
	abort();
}
extern "C" NOINLINE void jb_b(void) { jb_park(); BARRIER(); }
extern "C" NOINLINE void jb_a(void) { jb_b(); BARRIER(); }

// ---- coro: libcoro's x86-64 switch, written here: push the six
// callee-saved registers, save rsp in *prev, load *next, pop, ret.
struct coro_context { void **sp; };
extern "C" void coro_transfer(coro_context *prev, coro_context *next);
__asm__(".text\n.globl coro_transfer\n.type coro_transfer,@function\ncoro_transfer:\n"
	" pushq %rbp\n pushq %rbx\n pushq %r12\n pushq %r13\n pushq %r14\n pushq %r15\n"
	" movq %rsp, (%rdi)\n movq (%rsi), %rsp\n"
	" popq %r15\n popq %r14\n popq %r13\n popq %r12\n popq %rbx\n popq %rbp\n ret\n"
	".size coro_transfer, .-coro_transfer\n");
static coro_context main_coro, fiber_coro;
extern "C" NOINLINE void coro_park(void) {
	ntrace[2] = backtrace(trace[2], 32);
	coro_transfer(&fiber_coro, &main_coro);
	abort();
}
extern "C" NOINLINE void coro_b(void) { coro_park(); BARRIER(); }
extern "C" NOINLINE void coro_a(void) { coro_b(); BARRIER(); }
extern "C" void coro_entry(void) { coro_a(); abort(); }

// ---- fcontext: boost.context's jump_fcontext back to main.
static bctx::fcontext_t main_fctx, fiber_fctx;
extern "C" NOINLINE void fc_park(void) {
	ntrace[3] = backtrace(trace[3], 32);
	bctx::jump_fcontext(main_fctx, 0);
	abort();
}
extern "C" NOINLINE void fc_b(void) { fc_park(); BARRIER(); }
extern "C" NOINLINE void fc_a(void) { fc_b(); BARRIER(); }
static void fc_entry(bctx::transfer_t t) { main_fctx = t.fctx; fc_a(); abort(); }

static void print(const char *kind, void *addr, int k) {
	fprintf(stderr, "fiber %s %p", kind, addr);
	for (int i = 1; i < ntrace[k]; i++) fprintf(stderr, " %p", trace[k][i]);
	fprintf(stderr, "\n");
}

int main(void) {
	const size_t n = 256 << 10;
	getcontext(&fiber_uc);
	fiber_uc.uc_stack.ss_sp = stack_alloc(n);
	fiber_uc.uc_stack.ss_size = n;
	fiber_uc.uc_link = 0;
	makecontext(&fiber_uc, uc_a, 0);
	swapcontext(&main_uc, &fiber_uc);

	getcontext(&jb_uc);
	jb_uc.uc_stack.ss_sp = stack_alloc(n);
	jb_uc.uc_stack.ss_size = n;
	makecontext(&jb_uc, jb_a, 0);
	ucontext_t back;
	if (setjmp(main_jb) == 0) swapcontext(&back, &jb_uc);

	char *cs = (char *)stack_alloc(n);
	void **sp = (void **)(cs + n - 16);
	*--sp = 0;                      // coro_entry's return address: none
	*--sp = (void *)coro_entry;     // popped by ret
	for (int i = 0; i < 6; i++) *--sp = 0; // rbp rbx r12 r13 r14 r15
	fiber_coro.sp = sp;
	coro_transfer(&main_coro, &fiber_coro);

	char *fs = (char *)stack_alloc(n);
	bctx::fcontext_t f = bctx::make_fcontext(fs + n, n, fc_entry);
	fiber_fctx = bctx::jump_fcontext(f, 0).fctx;

	print("ucontext", &fiber_uc, 0);
	print("jmpbuf", &fiber_jb, 1);
	print("coro", &fiber_coro, 2);
	print("fcontext", &fiber_fctx, 3);
	fflush(stderr);
	printf("ready\n");
	fflush(stdout);
	for (;;) pause();
}
