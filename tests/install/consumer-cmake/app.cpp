// tests/install/consumer-cmake/app.cpp — the C++ twin of app.c: <etr/etr.h> included from a
// C++ translation unit, an operator recorded through a small RAII guard, the trace checked.
#include <etr/etr.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

namespace {

class OpGuard {
 public:
  OpGuard(const char *name, const etr_value *in, uint32_t n_in) {
    etr_record_init(&rec_, name, ETR_SCOPE_USER_SCOPE);
    if (etr_record_needs_inputs(&rec_)) {
      rec_.inputs = in;
      rec_.n_inputs = n_in;
    }
    etr_record_begin(&rec_);
  }
  ~OpGuard() { etr_record_end(&rec_); }
  OpGuard(const OpGuard &) = delete;
  OpGuard &operator=(const OpGuard &) = delete;

 private:
  etr_record rec_;
};

}  // namespace

int main(int argc, char **argv) {
  const std::string path = argc > 1 ? argv[1] : "consumer_cxx.json";
  if (etr_version() != ETR_VERSION_NUMBER) {
    std::fprintf(stderr, "library %s, header %s\n", etr_version_string(), ETR_VERSION_STRING);
    return 1;
  }
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  etr_trace *trace = nullptr;
  int rc = etr_trace_open(path.c_str(), &opt, &trace);
  if (rc != 0) {
    std::fprintf(stderr, "etr_trace_open(%s): %s\n", path.c_str(), etr_strerror(rc));
    return 1;
  }
  etr_trace_enable(trace);
  {
    const etr_value in[2] = {etr_value_string("hello"), etr_value_double(1.5)};
    OpGuard outer("consumer::cxx_op", in, 2);
    OpGuard inner("consumer::cxx_inner", nullptr, 0);
  }
  rc = etr_trace_close(trace);
  if (rc != 0) {
    std::fprintf(stderr, "etr_trace_close: %s\n", etr_strerror(rc));
    return 1;
  }
  std::ifstream f(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (text.empty() || text.find("\"consumer::cxx_op\"") == std::string::npos ||
      text.find("\"consumer::cxx_inner\"") == std::string::npos) {
    std::fprintf(stderr, "%s: missing, empty or without the consumer ops\n", path.c_str());
    return 1;
  }
  std::printf("ok: %s holds consumer::cxx_op and consumer::cxx_inner (etr %s)\n", path.c_str(),
              etr_version_string());
  return 0;
}
