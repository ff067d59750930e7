// adjacent_fc.cc: 8 boost.context fibers (boost::context::fiber, the
// fiber.hpp interface) whose stacks are adjacent 64 KiB slices of one mmap
// (one mapping), for the scan's phantom rules (package fibers, Scan and
// DropPhantoms), which must not depend on mapping boundaries. With argv[1]
// "guard" the lowest page of every slice is made PROT_NONE, which splits
// the mapping into one per stack; nothing else changes, so a scan must
// find the same contexts in both layouts.
//
// The handles are globals (fibers[i], gen), as a scheduler's are in its
// data, far from the stacks. Fiber i runs entry -> work -> descend (i % 3
// + 1 times, or 6 for fiber 7) -> park, which records backtrace() and
// resumes main through the handle the fiber was given (*back[i]). Then:
//
//   - fiber 2 reaches descend through with_gen, which starts a generator
//     fiber (slice 8) and resumes it once: the generator parks in gen_park;
//   - fiber 3 reaches descend through with_raw, which jumps with
//     jump_fcontext to a raw generator (slice 9) that keeps, in a global
//     (raw_caller), the pointer to the record jump_fcontext pushed on
//     fiber 3's stack, and jumps back: that record is stale, in frames
//     fiber 3 still has, and the call to descend rewrote its PC slot;
//   - fibers 4 and 5 are resumed once more and park again, shallower;
//   - fiber 7 is resumed and stays: back in work, it calls run_here, which
//     prints the report and pauses, so the process's only thread runs on
//     slice 7, in the mapping of the parked fibers. Main is parked in
//     resume_last (its record's pointer is the handle fiber 7 holds), and
//     each fiber's fiber_entry still holds the pointer to main's record of
//     the switch that made it, records main left deeper on its stack.
//
// The report, on stderr: "fiber fcontext ADDR FUNC PC1 PC2 ..." per parked
// context (the 7 fibers, the two generators, main), where ADDR holds the
// fcontext_t, FUNC is the function that switched away and PCi are
// backtrace()'s return addresses from index 1 (its callers), "stale
// fcontext ADDR" for raw_caller, "arena LO HI" (the mmap); then "ready" on
// stdout.
#include <boost/context/detail/fcontext.hpp>
#include <boost/context/fiber.hpp>
#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

namespace ctx = boost::context;
namespace bctx = boost::context::detail;

#define NOINLINE __attribute__((noinline))
#define BARRIER() __asm__ volatile("" ::: "memory")

enum { N = 8, SLICES = 10, GEN = N, RAW = N + 1, MAIN = N + 2 };
static const size_t SLICE = 64 << 10, PAGE = 4096;
static char *arena;
static void *trace[N + 3][64];
static int ntrace[N + 3];

struct slice_stack {
	int i;
	ctx::stack_context allocate() {
		ctx::stack_context sc;
		sc.size = SLICE - PAGE;
		sc.sp = arena + (i + 1) * SLICE;
		return sc;
	}
	void deallocate(ctx::stack_context &) {}
};

static ctx::fiber fibers[N], gen, *back[N], *gen_back;
static bctx::fcontext_t raw_gen, raw_caller;

static void print_fiber(void *handle, int t, const char *fn) {
	fprintf(stderr, "fiber fcontext %p %s", handle, fn);
	for (int k = 1; k < ntrace[t]; k++) fprintf(stderr, " %p", trace[t][k]);
	fprintf(stderr, "\n");
}

extern "C" NOINLINE void park(int i) {
	ntrace[i] = backtrace(trace[i], 64);
	*back[i] = std::move(*back[i]).resume();
	BARRIER();
}

extern "C" NOINLINE void descend(int i, int d) {
	volatile char pad[512];
	pad[0] = d;
	if (d > 1) descend(i, d - 1);
	else park(i);
	pad[1] = 0;
}

extern "C" NOINLINE void gen_park(void) {
	ntrace[GEN] = backtrace(trace[GEN], 64);
	*gen_back = std::move(*gen_back).resume();
	BARRIER();
}

extern "C" NOINLINE void with_gen(int i) {
	gen = ctx::fiber(std::allocator_arg, slice_stack{GEN}, [](ctx::fiber &&c) {
		gen_back = &c;
		for (;;) gen_park();
		return std::move(c);
	});
	gen = std::move(gen).resume();
	descend(i, i % 3 + 1);
	BARRIER();
}

extern "C" NOINLINE void raw_park(void) {
	ntrace[RAW] = backtrace(trace[RAW], 64);
	raw_caller = bctx::jump_fcontext(raw_caller, 0).fctx;
	BARRIER();
}

static void raw_entry(bctx::transfer_t t) {
	raw_caller = t.fctx;
	for (;;) raw_park();
}

extern "C" NOINLINE void with_raw(int i) {
	char *top = arena + (RAW + 1) * SLICE;
	raw_gen = bctx::jump_fcontext(bctx::make_fcontext(top, SLICE - PAGE, raw_entry), 0).fctx;
	descend(i, i % 3 + 1);
	BARRIER();
}

extern "C" NOINLINE void run_here(void) {
	for (int i = 0; i < N - 1; i++) print_fiber(&fibers[i], i, "park");
	print_fiber(&gen, GEN, "gen_park");
	print_fiber(&raw_gen, RAW, "raw_park");
	print_fiber(back[N - 1], MAIN, "resume_last");
	fprintf(stderr, "stale fcontext %p\n", (void *)&raw_caller);
	fprintf(stderr, "arena %p %p\n", (void *)arena, (void *)(arena + SLICES * SLICE));
	fflush(stderr);
	printf("ready\n");
	fflush(stdout);
	for (;;) pause();
}

extern "C" NOINLINE void work(int i) {
	if (i == 2) with_gen(i);
	else if (i == 3) with_raw(i);
	else descend(i, i == N - 1 ? 6 : i == 4 || i == 5 ? 5 : i % 3 + 1);
	if (i == N - 1) run_here();
	park(i); // fibers 4 and 5: the second park, shallower
	abort();
}

extern "C" NOINLINE void resume_last(void) {
	ntrace[MAIN] = backtrace(trace[MAIN], 64);
	fibers[N - 1] = std::move(fibers[N - 1]).resume();
	BARRIER();
}

int main(int argc, char **argv) {
	bool guard = argc > 1 && strcmp(argv[1], "guard") == 0;
	arena = (char *)mmap(0, SLICES * SLICE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (arena == MAP_FAILED) abort();
	for (int s = 0; guard && s < SLICES; s++)
		if (mprotect(arena + s * SLICE, PAGE, PROT_NONE) != 0) abort();
	for (int i = 0; i < N; i++)
		fibers[i] = ctx::fiber(std::allocator_arg, slice_stack{i}, [i](ctx::fiber &&c) {
			back[i] = &c;
			work(i);
			return std::move(c);
		});
	for (int i = 0; i < N; i++) fibers[i] = std::move(fibers[i]).resume();
	fibers[4] = std::move(fibers[4]).resume();
	fibers[5] = std::move(fibers[5]).resume();
	resume_last();
	abort();
}
