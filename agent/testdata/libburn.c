/* A shared library for the agent's churn test, loaded with dlopen after
 * the agent started: lib_burn -> lib_spin burn CPU (built without frame
 * pointers, so the unwinder needs the library's CFI). */
#define NOINLINE __attribute__((noinline))

volatile unsigned long lib_sink;

NOINLINE static unsigned long lib_spin(unsigned long x)
{
	for (int i = 0; i < 100000; i++)
		x = x * 2862933555777941757UL + 3037000493UL;
	return x;
}

NOINLINE void lib_burn(unsigned long rounds)
{
	for (unsigned long r = 0; r < rounds; r++)
		lib_sink += lib_spin(r);
}
