/* adjacent_uc.c: 8 ucontext fibers whose stacks are adjacent 64 KiB slices
 * of one mmap (one mapping), for the scan's phantom rules (package fibers,
 * Scan and DropPhantoms), which must not depend on mapping boundaries.
 * With argv[1] "guard" the lowest page of every slice is made PROT_NONE,
 * which splits the mapping into one per stack; nothing else changes (the
 * fibers use the slice above that page either way), so a scan must find
 * the same contexts in both layouts.
 *
 * Fiber i runs entry -> work -> descend (i % 3 + 1 times, or 6 for fiber 7)
 * -> park, which records backtrace() and swaps to main through uc[i].
 * Then:
 *
 *   - fiber 2 reaches descend through with_gen, which swaps to a generator
 *     (on slice 8) through a ucontext_t local to it and is resumed through
 *     it again: the local keeps with_gen's registers of then, a stale
 *     record in frames fiber 2 still has (its live part);
 *   - fiber 4 parks first deeper, through wait_uc, is resumed through it,
 *     returns to work and parks again, shallower, through uc[4]: wait_uc
 *     is a stale record below the parked stack pointer, whose frames
 *     fiber 4 left (its dead part), and that the second park's
 *     backtrace() overwrote;
 *   - fiber 1 does the same through deep_uc, 24 KiB deeper, out of that
 *     backtrace()'s reach: deep_uc's frames are whole, and its chain
 *     joins the parked one at work;
 *   - fiber 5 parks a second time too, through uc[5], shallower: the record
 *     is the real one, and the dead frames of its first park are left
 *     below it;
 *   - fiber 7 is resumed and stays: back in work, it calls run_here, which
 *     prints the report and pauses, so the process's only thread runs on
 *     slice 7, in the mapping of the parked fibers; uc[7] is a stale record
 *     of its first park, below that thread's stack pointer, and main_uc
 *     holds main, parked in resume_last (a real context: no thread runs on
 *     main's stack now).
 *
 * The report, on stderr: "fiber ucontext ADDR FUNC PC1 PC2 ..." per parked
 * context (the 7 fibers, the generator, main), where FUNC is the function
 * that switched away and PCi are backtrace()'s return addresses from
 * index 1 (its callers), "stale ucontext ADDR" per stale record, "arena
 * LO HI" (the mmap);
 * then "ready" on stdout. */
#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
#define BARRIER() __asm__ volatile("" ::: "memory")
#define N 8
#define SLICE (64 << 10)
#define PAGE 4096

static ucontext_t main_uc, uc[N], gen_uc, wait_uc, deep_uc, *gen_caller;
static void *trace[N + 2][64];
static int ntrace[N + 2];
static void *stale_local;
static char *arena;

static void print_fiber(ucontext_t *u, int t, const char *fn) {
	fprintf(stderr, "fiber ucontext %p %s", (void *)u, fn);
	for (int k = 1; k < ntrace[t]; k++) fprintf(stderr, " %p", trace[t][k]);
	fprintf(stderr, "\n");
}

NOINLINE void park(int i) {
	ntrace[i] = backtrace(trace[i], 64);
	swapcontext(&uc[i], &main_uc);
	BARRIER();
}

NOINLINE void park_wait(int i) {
	swapcontext(&wait_uc, &main_uc);
	BARRIER();
	(void)i;
}

NOINLINE void descend(int i, int d) {
	volatile char pad[512];
	pad[0] = d;
	if (d > 1) descend(i, d - 1);
	else if (i == 4) park_wait(i);
	else park(i);
	pad[1] = 0;
}

NOINLINE void park_deep(int i) {
	swapcontext(&deep_uc, &main_uc);
	BARRIER();
	(void)i;
}

NOINLINE void descend_big(int i, int d) {
	volatile char pad[4096];
	pad[0] = d;
	if (d > 1) descend_big(i, d - 1);
	else park_deep(i);
	pad[1] = 0;
}

NOINLINE void gen_park(void) {
	ntrace[N] = backtrace(trace[N], 64);
	swapcontext(&gen_uc, gen_caller);
	BARRIER();
}

NOINLINE void gen_loop(void) {
	for (;;) gen_park();
}

NOINLINE void with_gen(int i) {
	ucontext_t local;
	stale_local = &local;
	gen_caller = &local;
	getcontext(&gen_uc);
	gen_uc.uc_stack.ss_sp = arena + 8 * SLICE + PAGE;
	gen_uc.uc_stack.ss_size = SLICE - PAGE;
	gen_uc.uc_link = 0;
	makecontext(&gen_uc, gen_loop, 0);
	swapcontext(&local, &gen_uc);
	descend(i, i % 3 + 1);
	BARRIER();
}

NOINLINE void run_here(void) {
	for (int i = 0; i < N - 1; i++) print_fiber(&uc[i], i, "park");
	print_fiber(&gen_uc, N, "gen_park");
	print_fiber(&main_uc, N + 1, "resume_last");
	fprintf(stderr, "stale ucontext %p\nstale ucontext %p\nstale ucontext %p\nstale ucontext %p\n",
		stale_local, (void *)&wait_uc, (void *)&deep_uc, (void *)&uc[N - 1]);
	fprintf(stderr, "arena %p %p\n", (void *)arena, (void *)(arena + 9 * SLICE));
	fflush(stderr);
	printf("ready\n");
	fflush(stdout);
	for (;;) pause();
}

NOINLINE void work(int i) {
	if (i == 2) with_gen(i);
	else if (i == 1) descend_big(i, 6);
	else descend(i, i == N - 1 ? 6 : i == 4 || i == 5 ? 5 : i % 3 + 1);
	if (i == N - 1) run_here();
	park(i); /* fibers 1, 4 and 5: the second park, shallower */
	abort();
}

NOINLINE void entry(int i) {
	work(i);
	abort();
}

NOINLINE void resume_last(void) {
	ntrace[N + 1] = backtrace(trace[N + 1], 64);
	swapcontext(&main_uc, &uc[N - 1]);
	BARRIER();
}

int main(int argc, char **argv) {
	int guard = argc > 1 && strcmp(argv[1], "guard") == 0;
	arena = mmap(0, 9 * SLICE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (arena == MAP_FAILED) abort();
	for (int s = 0; guard && s < 9; s++)
		if (mprotect(arena + s * SLICE, PAGE, PROT_NONE) != 0) abort();
	for (int i = 0; i < N; i++) {
		getcontext(&uc[i]);
		uc[i].uc_stack.ss_sp = arena + i * SLICE + PAGE;
		uc[i].uc_stack.ss_size = SLICE - PAGE;
		uc[i].uc_link = 0;
		makecontext(&uc[i], (void (*)(void))entry, 1, i);
	}
	for (int i = 0; i < N; i++) swapcontext(&main_uc, &uc[i]);
	swapcontext(&main_uc, &deep_uc); /* fiber 1 parks again, through uc[1] */
	swapcontext(&main_uc, &wait_uc); /* fiber 4 too, through uc[4] */
	swapcontext(&main_uc, &uc[5]);   /* fiber 5 too */
	resume_last();
	abort();
}
