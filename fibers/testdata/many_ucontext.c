/* many_ucontext.c: N (argv[1], default 10000) ucontext fibers, each parked
 * in park() by swapcontext, for the fibers benchmarks; prints "ready". */
#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>
#include <unistd.h>
#include <sys/mman.h>
static ucontext_t main_uc, *uc;
__attribute__((noinline)) static void park(int i) { swapcontext(&uc[i], &main_uc); abort(); }
__attribute__((noinline)) static void entry(int i) { park(i); }
int main(int argc, char **argv) {
	int N = argc > 1 ? atoi(argv[1]) : 10000;
	size_t sz = 32 << 10;
	uc = calloc(N, sizeof *uc);
	char *mem = mmap(0, sz * N, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
	for (int i = 0; i < N; i++) {
		getcontext(&uc[i]);
		uc[i].uc_stack.ss_sp = mem + i * sz;
		uc[i].uc_stack.ss_size = sz;
		makecontext(&uc[i], (void (*)(void))entry, 1, i);
		swapcontext(&main_uc, &uc[i]);
	}
	printf("ready\n"); fflush(stdout);
	for (;;) pause();
}
