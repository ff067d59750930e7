// stale.cc: parked fibers beside stale saved records that still look
// parked, for the scan's phantom rule (fibers.DropPhantoms). Per kind
// (ucontext, fcontext) a fiber A runs KIND_a, which resumes a generator G
// through a record of A's and is resumed through another one, then calls
// KIND_deep (8 frames of 4 KB, so A parks more than the scan's 16 KB
// cluster below that record) and parks in KIND_park; G stays parked in
// its loop. The stale records:
//
//   - ucontext: the ucontext_t local to uc_a that A swapped to G through
//     and G swapped back to: resuming A does not change it, so it keeps
//     A's registers of then, with the SP of uc_a's frame, in A's live
//     stack;
//   - fcontext: the record jump_fcontext pushed on A's stack when A
//     jumped to G; G keeps the pointer to it (fc_caller, a global) after
//     it jumped back. fc_a's next call writes its return address into the
//     record's PC slot, so the record resumes into fc_a, on A's stack.
//
// main prints, on stderr, "fiber KIND ADDR" per parked fiber (A, G, and a
// third fiber B parked at once) and "stale KIND ADDR" per stale record,
// then "ready" on stdout, and sleeps.
#include <boost/context/detail/fcontext.hpp>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

namespace bctx = boost::context::detail;

#define NOINLINE __attribute__((noinline))

static void *stack_alloc(size_t n) {
	void *p = mmap(0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (p == MAP_FAILED) abort();
	return p;
}

static const size_t stack_size = 256 << 10;
static void *stale_uc;

// ---- ucontext
static ucontext_t main_uc, uc_a_ctx, uc_g_ctx, uc_b_ctx, *uc_caller;
extern "C" NOINLINE void uc_gen(void) {
	for (;;) swapcontext(&uc_g_ctx, uc_caller);
}
extern "C" NOINLINE void uc_park(void) {
	swapcontext(&uc_a_ctx, &main_uc);
	abort();
}
extern "C" NOINLINE void uc_deep(int n) {
	volatile char buf[4096];
	buf[0] = n;
	if (n) uc_deep(n - 1);
	else uc_park();
	buf[1] = 0;
}
extern "C" NOINLINE void uc_a(void) {
	ucontext_t local;
	stale_uc = &local;
	getcontext(&uc_g_ctx);
	uc_g_ctx.uc_stack.ss_sp = stack_alloc(stack_size);
	uc_g_ctx.uc_stack.ss_size = stack_size;
	makecontext(&uc_g_ctx, uc_gen, 0);
	uc_caller = &local;
	swapcontext(&local, &uc_g_ctx);
	uc_deep(8);
}
extern "C" NOINLINE void uc_b(void) {
	swapcontext(&uc_b_ctx, &main_uc);
	abort();
}

// ---- fcontext
static bctx::fcontext_t fc_main, fc_a_ctx, fc_g_ctx, fc_b_ctx, fc_caller;
static void fc_gen(bctx::transfer_t t) {
	fc_caller = t.fctx;
	for (;;) fc_caller = bctx::jump_fcontext(fc_caller, 0).fctx;
}
extern "C" NOINLINE void fc_park(void) {
	fc_main = bctx::jump_fcontext(fc_main, 0).fctx;
	abort();
}
extern "C" NOINLINE void fc_deep(int n) {
	volatile char buf[4096];
	buf[0] = n;
	if (n) fc_deep(n - 1);
	else fc_park();
	buf[1] = 0;
}
static void fc_a(bctx::transfer_t t) {
	fc_main = t.fctx;
	char *s = (char *)stack_alloc(stack_size);
	fc_g_ctx = bctx::jump_fcontext(bctx::make_fcontext(s + stack_size, stack_size, fc_gen), 0).fctx;
	fc_deep(8);
	abort();
}
static void fc_b(bctx::transfer_t t) {
	fc_main = t.fctx;
	fc_main = bctx::jump_fcontext(fc_main, 0).fctx;
	abort();
}

int main(void) {
	getcontext(&uc_a_ctx);
	uc_a_ctx.uc_stack.ss_sp = stack_alloc(stack_size);
	uc_a_ctx.uc_stack.ss_size = stack_size;
	makecontext(&uc_a_ctx, uc_a, 0);
	swapcontext(&main_uc, &uc_a_ctx);
	getcontext(&uc_b_ctx);
	uc_b_ctx.uc_stack.ss_sp = stack_alloc(stack_size);
	uc_b_ctx.uc_stack.ss_size = stack_size;
	makecontext(&uc_b_ctx, uc_b, 0);
	swapcontext(&main_uc, &uc_b_ctx);

	char *sa = (char *)stack_alloc(stack_size), *sb = (char *)stack_alloc(stack_size);
	fc_a_ctx = bctx::jump_fcontext(bctx::make_fcontext(sa + stack_size, stack_size, fc_a), 0).fctx;
	fc_b_ctx = bctx::jump_fcontext(bctx::make_fcontext(sb + stack_size, stack_size, fc_b), 0).fctx;

	fprintf(stderr, "fiber ucontext %p\nfiber ucontext %p\nfiber ucontext %p\nstale ucontext %p\n",
		(void *)&uc_a_ctx, (void *)&uc_g_ctx, (void *)&uc_b_ctx, stale_uc);
	fprintf(stderr, "fiber fcontext %p\nfiber fcontext %p\nfiber fcontext %p\nstale fcontext %p\n",
		(void *)&fc_a_ctx, (void *)&fc_g_ctx, (void *)&fc_b_ctx, (void *)&fc_caller);
	fflush(stderr);
	printf("ready\n");
	fflush(stdout);
	for (;;) pause();
}
