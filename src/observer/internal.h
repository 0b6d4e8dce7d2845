/* Internal declarations shared by the observer module's files (not installed). */
#ifndef ETR_OBSERVER_INTERNAL_H
#define ETR_OBSERVER_INTERNAL_H

#include "etr/common.h"

#if defined(__GNUC__)
#define ETR__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define ETR__PRINTF(a, b)
#endif

/* Diagnostics through the log hook; never from a signal handler. */
void etr__log(etr_log_level level, const char *fmt, ...) ETR__PRINTF(2, 3);

#endif
