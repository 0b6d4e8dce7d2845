/* tests/unit/test_abi.c — the instrumentation a runtime puts on its hot path, for the ABI
 * test (test_abi.sh):
 * - compiled as C11 with -Wall -Wextra -Werror -pedantic: the headers are clean C11;
 * - compiled with -DETR_DISABLE: the object file must reference no etr symbol at all;
 * - compiled without it (control): it must reference etr__record_prepare/begin/end.
 * Only the inline API is used here, so that any etr reference left comes from the macros. */
#include <etr/etr.h>

int run_op(int x);

static int kernel(int x) { return x * 2 + 1; }

int run_op(int x) {
  etr_tensor t = {&x, &x, 0, 1, 4, "int", "cpu", 0, NULL, NULL};
  etr_value in[2];
  etr_value out[1];
  etr_record rec;
  int y;
  in[0] = etr_value_tensor(&t);
  in[1] = etr_value_int(x);
  etr_record_init(&rec, "aten::example", ETR_SCOPE_FUNCTION);
  if (etr_record_is_active(&rec)) rec.schema = "aten::example(Tensor self, int x) -> Tensor";
  if (etr_record_needs_inputs(&rec)) {
    rec.inputs = in;
    rec.n_inputs = 2;
  }
  etr_record_begin(&rec);
  y = kernel(x);
  out[0] = etr_value_tensor(&t);
  if (etr_record_needs_outputs(&rec)) {
    rec.outputs = out;
    rec.n_outputs = 1;
  }
  etr_record_end(&rec);
  etr_tensor_died(&x);
  etr_storage_died(&x);
  return y;
}
