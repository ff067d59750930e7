/* The program of crash.core: no C library, so its core is small and its
   stack short and fixed. _start calls middle, which calls crash, which
   executes ud2 (SIGILL). The ud2 is in asm so that gcc does not know crash
   never returns and leaves code after each call. */
__attribute__((noinline)) void crash(void) { __asm__ volatile("ud2"); }
__attribute__((noinline)) void middle(void) { crash(); __asm__ volatile(""); }
void _start(void) { middle(); for (;;) ; }
