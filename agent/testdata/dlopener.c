/* Waits for a line on stdin, then dlopens the library LIB (argv[1]) and
 * calls its lib_burn for SECONDS (argv[2]) seconds, then exits 0: a
 * mapping change that only the kernel's mmap records tell a profiler
 * started before it. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	char line[64];

	if (argc != 3) {
		fprintf(stderr, "usage: dlopener LIB SECONDS\n");
		return 2;
	}
	if (!fgets(line, sizeof line, stdin))
		return 1;
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	void (*burn)(unsigned long) = (void (*)(unsigned long))dlsym(h, "lib_burn");
	if (!burn) {
		fprintf(stderr, "dlsym: %s\n", dlerror());
		return 1;
	}
	double end = now() + atof(argv[2]);
	while (now() < end)
		burn(100);
	return 0;
}
