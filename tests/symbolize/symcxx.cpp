// Test library for tests/symbolize: C++ functions whose symbols are mangled, one of them
// inlined (its frame is named from DWARF's linkage name, demangled).
namespace etrtest {
template <typename T>
struct Box {
  __attribute__((noinline)) static T twice(T x) { return x * 2 + 1; }
  static inline __attribute__((always_inline)) T apply(T x, T (*f)(T));
};
}  // namespace etrtest

// Lines of the calls: [0] symcxx_run's call of Box<long>::apply, [1] apply's call of f.
extern "C" int symcxx_lines[2];
int symcxx_lines[2];

template <typename T>
inline T etrtest::Box<T>::apply(T x, T (*f)(T)) {
  T r;
  symcxx_lines[1] = __LINE__ + 1;
  r = f(x + 1);
  __asm__ volatile("" ::: "memory");
  return r * 2;
}

extern "C" __attribute__((noinline)) long symcxx_run(long x, long (*f)(long)) {
  long r;
  symcxx_lines[0] = __LINE__ + 1;
  r = etrtest::Box<long>::apply(x, f);
  __asm__ volatile("" ::: "memory");
  return r + 3;
}

extern "C" void *symcxx_addr(void) { return reinterpret_cast<void *>(&etrtest::Box<long>::twice); }
