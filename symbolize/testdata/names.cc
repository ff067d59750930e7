// names.cc: C++ names for comparing rewind's demangling with c++filt and
// addr2line -C: namespaces, a class template with a member template
// inlined into its caller, a lambda, an overloaded operator.
#include <cstdio>

namespace outer_ns {
namespace inner_ns {

template <typename T> struct Box {
	T v;
	__attribute__((noinline)) T get(int k) const
	{
		__asm__ volatile("" ::: "memory");
		return v + T(k);
	}
	template <typename U> inline __attribute__((always_inline)) U conv(U u) const
	{
		return U(get(int(u))) * 2;
	}
	__attribute__((noinline)) Box operator+(const Box &o) const
	{
		__asm__ volatile("" ::: "memory");
		return Box{v + o.v};
	}
};

__attribute__((noinline)) long work(const Box<int> &b, int n)
{
	auto f = [&](int i) __attribute__((noinline)) { return b.get(i) + n; };
	long s = 0;
	for (int i = 0; i < n; i++)
		s += f(i) + b.conv<long>(i) + (b + b).get(i);
	return s;
}

} // namespace inner_ns
} // namespace outer_ns

int main(int argc, char **)
{
	outer_ns::inner_ns::Box<int> b{argc};
	std::printf("%ld\n", outer_ns::inner_ns::work(b, argc + 3));
	return 0;
}
