// realign: GCC realigns realign's stack through a DRAP register (an
// over-aligned local beside alloca), so that its body's CFA is a DWARF
// expression, *(rbp - 8). main calls it for argv[1] seconds (default: a
// long time) and prints "ready" first.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

__attribute__((noinline)) long inner(volatile char *p, int n)
{
	long s = 0;
	for (int i = 0; i < n; i++)
		s += p[i] * i;
	return s;
}

__attribute__((noinline)) long realign(int n)
{
	volatile char buf[64] __attribute__((aligned(64)));
	char *p = __builtin_alloca(n);
	for (int i = 0; i < n; i++)
		p[i] = i;
	buf[0] = 1;
	return inner(p, n) + buf[0];
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 1e9;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	printf("ready\n");
	fflush(stdout);
	long s = 0;
	for (;;) {
		for (int i = 0; i < 100000; i++)
			s += realign(100 + (i & 7));
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec + (t.tv_nsec - t0.tv_nsec) / 1e9 > secs)
			break;
	}
	printf("%ld\n", s);
	return 0;
}
