/* etr/etr.h — the one header users include.
 *
 * etr records operator calls of a runtime (begin/end pairs with typed inputs and outputs)
 * and hands them to observers; the execution-trace observer streams them to a JSON
 * execution trace that PyTorch's tooling and MLCommons Chakra read.
 *
 *   etr_trace *t;
 *   etr_trace_open("trace.json", NULL, &t);  etr_trace_enable(t);
 *   etr_record r;  etr_record_init(&r, "aten::add", ETR_SCOPE_FUNCTION);
 *   ... set r.inputs when etr_record_needs_inputs(&r) ...
 *   etr_record_begin(&r);  run();  etr_record_end(&r);
 *   etr_trace_close(t);
 */
#ifndef ETR_ETR_H
#define ETR_ETR_H

#include "etr/common.h"
#include "etr/version.h"
#include "etr/value.h"
#include "etr/record.h"
#include "etr/observer.h"
#include "etr/trace.h"
#include "etr/traceback.h"
#include "etr/dist.h"

#endif /* ETR_ETR_H */
