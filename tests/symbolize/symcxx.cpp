// Test library for tests/symbolize: a C++ function whose symbol is mangled.
namespace etrtest {
template <typename T>
struct Box {
  __attribute__((noinline)) static T twice(T x) { return x * 2 + 1; }
};
}  // namespace etrtest

extern "C" void *symcxx_addr(void) {
  return reinterpret_cast<void *>(&etrtest::Box<long>::twice);
}
