/* Internal declarations shared by the observer module's files (not installed). */
#ifndef ETR_OBSERVER_INTERNAL_H
#define ETR_OBSERVER_INTERNAL_H

#include <stdbool.h>

#include "etr/common.h"

#if defined(__GNUC__)
#define ETR__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define ETR__PRINTF(a, b)
/* Whether p points into a string etr_intern handed out (bytes that never change). Lock-free;
 * a few compares per block of copies. */
bool etr__interned(const char *p);

#endif

/* Diagnostics through the log hook; never from a signal handler. */
void etr__log(etr_log_level level, const char *fmt, ...) ETR__PRINTF(2, 3);

/* Whether p points into a string etr_intern handed out (bytes that never change). Lock-free;
 * a few compares per block of copies. */
bool etr__interned(const char *p);

#endif
