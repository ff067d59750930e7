// A program that blocks in nanosleep under two callers in turn, ten
// sleeps under each: main -> path_a -> waiter and main -> path_b ->
// waiter, with the same frame sizes, so that both reach the system call
// with the same PC and SP and only a return address on the stack tells
// them apart. Built without frame pointers. It prints "ready", then a
// line after every 200 sleeps.
#include <stdio.h>
#include <time.h>

__attribute__((noinline)) static void waiter(void)
{
	struct timespec ts = {0, 1000000};
	nanosleep(&ts, NULL);
}

// (The asm after the call keeps it from being a tail call, and the two
// functions from being folded into one.)
__attribute__((noinline)) static void path_a(void)
{
	waiter();
	__asm__ volatile("nop" ::: "memory");
}

__attribute__((noinline)) static void path_b(void)
{
	waiter();
	__asm__ volatile("nop; nop" ::: "memory");
}

int main(void)
{
	printf("ready\n");
	fflush(stdout);
	for (long i = 1;; i++) {
		if ((i / 10) % 2)
			path_a();
		else
			path_b();
		if (i % 200 == 0) {
			printf("%ld\n", i);
			fflush(stdout);
		}
	}
}
