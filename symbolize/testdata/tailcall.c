/* tailcall.c: tail calls for the call-site tests (-O2 turns every call
 * in tail position into a jump): a chain, a cycle, an indirect tail call
 * (DW_AT_call_target is a DWARF expression) and tail calls to a library
 * function (a declaration: DW_AT_call_origin names it). */
#include <stdio.h>
#include <stdlib.h>

#define NOIPA __attribute__((noipa))
#define BARRIER() __asm__ volatile("" ::: "memory")

volatile int sink;

NOIPA void d(int x) { sink = x; BARRIER(); }
NOIPA void c(int x) { d(x * 3); }
NOIPA void b(int x) { c(x + 2); }
NOIPA void a(int x) { b(x + 1); BARRIER(); }

NOIPA void ping(int x);
NOIPA void pong(int x) { if (x > 0) ping(x - 1); else d(x); }
NOIPA void ping(int x) { pong(x - 1); }

void (*volatile fp)(int) = d;
NOIPA void indirect(int x) { fp(x + 1); }

NOIPA void lib(int x) { printf("%d\n", x); }
NOIPA void lib2(int x) { if (x) exit(x); else puts("0"); }

int main(int argc, char **argv)
{
	(void)argv;
	a(argc);
	ping(argc);
	indirect(argc);
	lib(argc);
	BARRIER();
	lib2(argc - 1);
	BARRIER();
	return 0;
}
