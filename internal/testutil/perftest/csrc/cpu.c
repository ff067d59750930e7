/*
 * cpu.c: a CPU-bound multi-threaded program for profiler tests.
 *
 * Usage: cpu SECONDS [THREADS]
 *        cpu -w ROUNDS [THREADS]
 * main and THREADS workers (default 3) burn CPU for SECONDS seconds in
 * chains of non-inlined functions, part of the time inside libc (qsort
 * calling back into the program), then main joins them and exits 0.
 * With -w each thread does ROUNDS rounds of that work instead, and the
 * program prints the seconds it took, wall and CPU (user + system, all
 * threads), for overhead measurements.
 * Built with -O2 and without frame pointers, only CFI can unwind it.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

static double deadline;
static long rounds; /* -w: fixed work per thread instead of a deadline */
static volatile uint64_t sink;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

NOINLINE static uint64_t hash_block(uint64_t seed)
{
	uint64_t h = seed;

	for (int i = 0; i < 20000; i++)
		h = (h ^ (h >> 29)) * 0xbf58476d1ce4e5b9ULL + i;
	return h;
}

NOINLINE static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

NOINLINE static uint64_t sort_block(uint64_t seed)
{
	uint32_t v[512];

	for (int i = 0; i < 512; i++) {
		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		v[i] = seed >> 33;
	}
	qsort(v, 512, sizeof v[0], cmp_u32);
	return v[7];
}

NOINLINE static uint64_t level3(uint64_t seed)
{
	return (seed & 3) ? hash_block(seed) : sort_block(seed);
}

NOINLINE static uint64_t level2(uint64_t seed)
{
	uint64_t r = level3(seed);

	sink += r;
	return r + 1;
}

NOINLINE static uint64_t level1(uint64_t seed)
{
	uint64_t r = level2(seed ^ 0x9e3779b97f4a7c15ULL);

	sink ^= r;
	return r;
}

NOINLINE static void burn(uint64_t seed)
{
	for (long k = 0; rounds ? k < rounds : now() < deadline; k++) {
		for (int i = 0; i < 16; i++)
			seed = level1(seed + i);
	}
}

NOINLINE static void *worker(void *arg)
{
	burn((uint64_t)(uintptr_t)arg);
	return NULL;
}

int main(int argc, char **argv)
{
	double secs, t0 = now();
	int n;
	pthread_t th[64];

	if (argc > 2 && strcmp(argv[1], "-w") == 0) {
		rounds = atol(argv[2]);
		argv += 1;
		argc -= 1;
	}
	secs = argc > 1 ? atof(argv[1]) : 1;
	n = argc > 2 ? atoi(argv[2]) : 3;

	if (n < 0 || n > 64) {
		fprintf(stderr, "threads: 0..64\n");
		return 2;
	}
	deadline = now() + secs;
	for (int i = 0; i < n; i++)
		if (pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)(i + 1)) != 0) {
			perror("pthread_create");
			return 1;
		}
	burn(12345);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	if (rounds) {
		struct rusage ru;

		getrusage(RUSAGE_SELF, &ru);
		printf("%.6f %.6f\n", now() - t0,
		       ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
		       ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
	}
	return 0;
}
