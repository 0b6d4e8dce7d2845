// tests/unit/test_abi.cpp — <etr/etr.h> must be usable from C++: test_abi.sh compiles this
// file as C++11 and C++17 with -Wall -Wextra -Werror -pedantic. It touches every public
// header: option initialisers, value constructors, the record life cycle, callbacks.
#include <etr/etr.h>

#include <cstdint>
#include <cstdio>

namespace {

void on_enter(const etr_record *rec, void *user) {
  ++*static_cast<unsigned *>(user);
  (void)etr_record_handle(rec);
}

void on_exit(const etr_record *rec, void *user) {
  (void)rec;
  (void)user;
}

}  // namespace

int abi_cxx_main() {
  static_assert(
      ETR_VERSION_NUMBER == ETR_VERSION_MAJOR * 10000 + ETR_VERSION_MINOR * 100 + ETR_VERSION_PATCH,
      "version macros");
  if (etr_version() != ETR_VERSION_NUMBER) return 1;

  unsigned seen = 0;
  etr_observer_options oo = ETR_OBSERVER_OPTIONS_INIT;
  oo.enter = on_enter;
  oo.exit = on_exit;
  oo.user = &seen;
  oo.needs = ETR_NEEDS_INPUTS | ETR_NEEDS_OUTPUTS;
  etr_observer_id id = 0;
  if (etr_observer_add(&oo, &id) != ETR_OK) return 2;

  etr_trace_options to = ETR_TRACE_OPTIONS_INIT;
  to.schema = ETR_SCHEMA_1_1_0;
  etr_trace *trace = nullptr;
  int rc = etr_trace_open("abi_cxx.json", &to, &trace);
  if (rc != 0) {
    std::fprintf(stderr, "%s: %s\n", etr_err_name(rc), etr_strerror(rc));
    return 3;
  }
  etr_trace_enable(trace);

  const int64_t sizes[2] = {2, 3};
  const int64_t strides[2] = {3, 1};
  float data[6] = {0};
  etr_tensor t = {data, data, 0, 6, 4, "float", "cpu", 2, sizes, strides};
  const etr_value items[3] = {etr_value_int(1), etr_value_double(0.5), etr_value_bool(true)};
  const etr_value in[6] = {etr_value_tensor(&t),      etr_value_list(items, 3),
                           etr_value_tuple(items, 2), etr_value_string("s"),
                           etr_value_device("cpu"),   etr_value_object("Generator")};
  const etr_value out[2] = {etr_value_tensor(&t), etr_value_none()};
  etr_kernel_info kernel = ETR_KERNEL_INFO_INIT;
  etr_collective_info coll = ETR_COLLECTIVE_INFO_INIT;
  coll.name = "allreduce";

  etr_record rec;
  etr_record_init(&rec, "aten::abi_cxx", ETR_SCOPE_USER_SCOPE);
  if (etr_record_is_active(&rec)) {
    rec.fw_tid = etr_thread_id();
    rec.kernel = &kernel;
    rec.collective = &coll;
  }
  if (etr_record_needs_inputs(&rec)) {
    rec.inputs = in;
    rec.n_inputs = 6;
  }
  etr_record_begin(&rec);
  if (etr_record_needs_outputs(&rec)) {
    rec.outputs = out;
    rec.n_outputs = 2;
  }
  etr_record_end(&rec);
  etr_tensor_died(&t);
  etr_storage_died(data);

  etr_trace_stats ts = {};
  ts.struct_size = sizeof ts;
  etr_trace_stats_get(trace, &ts);
  etr_registry_stats rs = {};
  etr_registry_stats_get(&rs);
  etr_observer_remove(id);
  etr_set_log(nullptr, nullptr);
  return etr_trace_close(trace) == 0 && seen == 1 ? 0 : 4;
}
