// dl: after a line on stdin, dlopens liba.so and spins in its hot_a for
// argv[1] seconds, dlcloses it (unmapping it), then dlopens libb.so,
// usually mapped where liba.so was, and spins in hot_b as long; it prints
// where each library was mapped. The libraries are this file built with
// -shared -DLIB=hot_a and -DLIB=hot_b.
#ifdef LIB
#include <time.h>

__attribute__((noinline)) static long spin(long n)
{
	volatile long s = 0;
	for (long i = 0; i < n; i++)
		s += i * i;
	return s;
}

long LIB(double secs)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	long s = 0;
	do {
		s += spin(100000);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while (t.tv_sec - t0.tv_sec + (t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
	return s;
}
#else
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *lib(const char *dir, const char *name, const char *fn, long (**f)(double))
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	void *h = dlopen(path, RTLD_NOW);
	if (!h) {
		fprintf(stderr, "%s\n", dlerror());
		exit(1);
	}
	*f = (long (*)(double))dlsym(h, fn);
	struct link_map *lm;
	dlinfo(h, RTLD_DI_LINKMAP, &lm);
	printf("%s at %#lx\n", name, (unsigned long)lm->l_addr);
	fflush(stdout);
	return h;
}

__attribute__((noinline)) long phase_a(const char *dir, double secs)
{
	long (*f)(double);
	void *h = lib(dir, "liba.so", "hot_a", &f);
	long s = f(secs);
	dlclose(h);
	return s;
}

__attribute__((noinline)) long phase_b(const char *dir, double secs)
{
	long (*f)(double);
	void *h = lib(dir, "libb.so", "hot_b", &f);
	long s = f(secs);
	dlclose(h);
	return s;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 1;
	char dir[4096];
	strncpy(dir, argv[0], sizeof dir - 1);
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = 0;
	else
		strcpy(dir, ".");
	printf("ready\n");
	fflush(stdout);
	char line[16];
	if (!fgets(line, sizeof line, stdin))
		return 1;
	long s = phase_a(dir, secs) + phase_b(dir, secs);
	printf("done %ld\n", s & 1);
	return 0;
}
#endif
