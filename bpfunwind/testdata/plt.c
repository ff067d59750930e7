// plt: main calls a one-instruction function of a shared library
// (built from this file with -DLIB) through its PLT stub, in a tight loop,
// so that samples land in the stub, whose CFA is the PLT's DWARF
// expression. main runs for argv[1] seconds (default: a long time).
#ifdef LIB
int nop(int x) { return x + 1; }
#else
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int nop(int x);

__attribute__((noinline)) long calls(void)
{
	long s = 0;
	for (int i = 0; i < 1000000; i++)
		s += nop(i);
	return s;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 1e9;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	long s = 0;
	do {
		s += calls();
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while (t.tv_sec - t0.tv_sec + (t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
	printf("%ld\n", s);
	return 0;
}
#endif
