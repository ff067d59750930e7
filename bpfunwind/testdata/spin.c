// A CPU-bound program built without frame pointers whose hot path runs in
// Debian's libc (qsort, also built without them): main -> outer -> middle
// -> inner -> qsort -> cmp. It prints "ready" and runs until killed.
#include <stdio.h>
#include <stdlib.h>

static volatile int sink;

__attribute__((noinline)) static int cmp(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

__attribute__((noinline)) static void inner(int *v, int n)
{
	for (int i = 0; i < n; i++)
		v[i] = (i * 7919) % n;
	qsort(v, n, sizeof(int), cmp);
	sink += v[0];
}

__attribute__((noinline)) static void middle(int *v, int n)
{
	inner(v, n);
	sink++;
}

__attribute__((noinline)) static void outer(int *v, int n)
{
	middle(v, n);
	sink++;
}

int main(void)
{
	static int v[4096];
	printf("ready\n");
	fflush(stdout);
	for (;;)
		outer(v, 4096);
}
