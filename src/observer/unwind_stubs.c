/* TEMPORARY: weak stand-ins for src/unwind/ while its parts are being written; each is
 * replaced by the real definition as soon as that file exists. Removed once all landed. */
#include <string.h>

#include "unwind/unwind.h"

__attribute__((weak)) size_t etr__unwind_capture(uintptr_t *ips, size_t max, size_t skip,
                                                 uint64_t *modgen) {
  (void)ips, (void)max, (void)skip;
  *modgen = 0;
  return 0;
}
__attribute__((weak)) void etr__unwind_stats_add(etr_traceback_stats *out) { (void)out; }
__attribute__((weak)) const etr__module *etr__modules_find(uint64_t gen, uintptr_t ip) {
  (void)gen, (void)ip;
  return NULL;
}
__attribute__((weak)) uint64_t etr__modules_generation(void) { return 0; }
__attribute__((weak)) etr__symbolizer *etr__symbolizer_new(void) { return NULL; }
__attribute__((weak)) void etr__symbolizer_free(etr__symbolizer *s) { (void)s; }
__attribute__((weak)) int etr__symbolize(etr__symbolizer *s, const char *path,
                                         const uint8_t *build_id, size_t build_id_len,
                                         uint64_t vaddr, uintptr_t live_ip, etr__symbol *out) {
  (void)s, (void)path, (void)build_id, (void)build_id_len, (void)vaddr, (void)live_ip, (void)out;
  return -1;
}
__attribute__((weak)) void etr__symbolize_stats_add(etr_traceback_stats *out) { (void)out; }
__attribute__((weak)) size_t etr__script_interleave(const uintptr_t *ips, size_t n_ips,
                                                    uint64_t *out, size_t max) {
  size_t n = n_ips < max ? n_ips : max;
  for (size_t i = 0; i < n; i++) out[i] = ips[i];
  return n;
}
__attribute__((weak)) int etr__script_frame_get(uint64_t id, etr_script_frame *out) {
  (void)id, (void)out;
  return ETR_ENOENT;
}
__attribute__((weak)) bool etr__script_active(void) { return false; }
__attribute__((weak)) void etr__script_stats_add(etr_traceback_stats *out) { (void)out; }
__attribute__((weak)) int etr_script_unwinder_register(const etr_script_unwinder *u) {
  (void)u;
  return ETR_ENOTSUP;
}
__attribute__((weak)) int etr_script_unwinder_unregister(void) { return 0; }
__attribute__((weak)) void etr_script_release_pending(void) {}
