/* Functions of the shapes SFrame must describe: leaves, frames with and
   without a frame pointer, variable-sized frames, calls through the PLT,
   noreturn calls and (on AArch64) signed return addresses. */
#include <stdlib.h>
#include <string.h>

extern int ext_sink(int);

int leaf(int x) { return x * 3 + 1; }

int caller(int n) { return ext_sink(leaf(n)) + 1; }

int dynamic(int n)
{
	char *p = __builtin_alloca(n + 1);
	memset(p, n, n + 1);
	return ext_sink(p[n / 2]);
}

__attribute__((noreturn)) void die(int code)
{
	ext_sink(code);
	abort();
}

int many_args(int a, int b, int c, int d, int e, int f, int g, int h, int i)
{
	int buf[64];
	for (int k = 0; k < 64; k++)
		buf[k] = ext_sink(a + b + c + d + e + f + g + h + i + k);
	return buf[a & 63] + buf[b & 63];
}

#if defined(__aarch64__)
__attribute__((target("branch-protection=pac-ret+b-key"))) int signed_b(int n)
{
	return ext_sink(n) + 2;
}
#endif
