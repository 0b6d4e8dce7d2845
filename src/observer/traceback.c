/* etr_traceback_stats_get: the counters of capture, symbolization and script frames. */
#include <string.h>

#include "etr/traceback.h"
#include "unwind/unwind.h"

int etr_traceback_stats_get(etr_traceback_stats *out) {
  if (!out) return ETR_EINVAL;
  etr_traceback_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  etr__unwind_stats_add(&s);
  etr__symbolize_stats_add(&s);
  etr__script_stats_add(&s);
  size_t n = out->struct_size == 0 || out->struct_size > sizeof s ? sizeof s : out->struct_size;
  memcpy(out, &s, n);
  out->struct_size = n;
  return 0;
}
