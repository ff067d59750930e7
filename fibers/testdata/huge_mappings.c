/* huge_mappings.c: a parked ucontext fiber beside a mapping a scan cannot
 * get through: argv[1] "file" maps 8 TB of the one-page file argv[2] (reads
 * past its end fail), "anon" reserves 64 TB with MAP_NORESERVE and
 * MADV_DONTDUMP (live reads give zeros; a core holds none of it). Prints
 * "fiber ucontext ADDR" on stderr, then "ready". */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>
static ucontext_t main_uc, fiber_uc;
__attribute__((noinline)) static void park(void) { swapcontext(&fiber_uc, &main_uc); abort(); }
__attribute__((noinline)) static void entry(void) { park(); }
int main(int argc, char **argv) {
	size_t n = 64 << 10;
	if (argc > 2 && strcmp(argv[1], "file") == 0) {
		int fd = open(argv[2], O_RDWR | O_CREAT, 0600);
		if (fd < 0 || ftruncate(fd, 4096) != 0) abort();
		if (mmap(0, 8ULL << 40, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED) abort();
	} else if (argc > 1 && strcmp(argv[1], "anon") == 0) {
		void *p = mmap(0, 64ULL << 40, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (p == MAP_FAILED || madvise(p, 64ULL << 40, MADV_DONTDUMP) != 0) abort();
	}
	getcontext(&fiber_uc);
	fiber_uc.uc_stack.ss_sp = mmap(0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	fiber_uc.uc_stack.ss_size = n;
	makecontext(&fiber_uc, entry, 0);
	swapcontext(&main_uc, &fiber_uc);
	fprintf(stderr, "fiber ucontext %p\n", (void *)&fiber_uc);
	printf("ready\n");
	fflush(stdout);
	for (;;) pause();
}
