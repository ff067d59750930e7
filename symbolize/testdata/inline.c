/* inline.c: inlined calls at two nesting levels around a noinline leaf,
 * for comparing rewind's symbolization with addr2line -i. */
#include <stdio.h>

__attribute__((noinline)) int leaf(int x)
{
	__asm__ volatile("" ::: "memory");
	return x * 3 + 1;
}

static inline __attribute__((always_inline)) int inner(int x)
{
	int r = leaf(x);
	return r + leaf(r);
}

static inline __attribute__((always_inline)) int outer(int x)
{
	int s = inner(x + 1);
	return s * inner(s);
}

__attribute__((noinline)) int mid(int x)
{
	return outer(x) + 7;
}

static inline __attribute__((always_inline)) int twice(int x)
{
	return mid(x) + mid(x + 1);
}

int main(int argc, char **argv)
{
	(void)argv;
	printf("%d\n", twice(argc) + outer(argc));
	return 0;
}
