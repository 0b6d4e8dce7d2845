/* Error strings, the log hook, the version and on/off environment switches: the small
 * shared pieces of the library. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "etr/common.h"
#include "etr/version.h"
#include "observer/internal.h"

const char *etr_strerror(int err) {
  switch (err) {
#define ETR__ERR_MSG(name, value, msg) \
  case value:                          \
    return msg;
    ETR_ERRNO_MAP(ETR__ERR_MSG)
#undef ETR__ERR_MSG
    default:
      return "unknown error";
  }
}

const char *etr_err_name(int err) {
  switch (err) {
#define ETR__ERR_NAME(name, value, msg) \
  case value:                           \
    return "ETR_" #name;
    ETR_ERRNO_MAP(ETR__ERR_NAME)
#undef ETR__ERR_NAME
    default:
      return "ETR_E?";
  }
}

int etr_version(void) { return ETR_VERSION_NUMBER; }
const char *etr_version_string(void) { return ETR_VERSION_STRING; }

static etr_log_fn log_fn;
static void *log_user;

void etr_set_log(etr_log_fn fn, void *user) {
  __atomic_store_n(&log_user, user, __ATOMIC_RELAXED);
  __atomic_store_n(&log_fn, fn, __ATOMIC_RELEASE);
}

void etr__log(etr_log_level level, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  etr_log_fn fn = __atomic_load_n(&log_fn, __ATOMIC_ACQUIRE);
  if (fn) {
    fn(level, msg, __atomic_load_n(&log_user, __ATOMIC_RELAXED));
    return;
  }
  /* ETR_LOG set: all levels, or none (0, off, false, no). Unset: errors and warnings when
   * the trace was asked for through ETR_TRACE, whose user has no return code to look at
   * (a path that cannot be opened, a bad ETR_TRACE_* value, a write error); nothing for a
   * program that calls the API, which gets the error codes. */
  const char *env = getenv("ETR_LOG");
  bool print;
  if (env && *env) {
    print = !etr__env_flag_off(env);
  } else {
    const char *tr = getenv("ETR_TRACE");
    print = level <= ETR_LOG_WARN && tr && *tr;
  }
  if (print) {
    /* (one write(2), no stdio: a record made in a signal handler may log, and stderr's
     * lock may be held by the code it interrupted) */
    static const char *names[] = {"error", "warn", "info", "debug"};
    char line[sizeof msg + 32];
    int n = snprintf(line, sizeof line, "etr: %s: %s\n", names[(unsigned)level & 3u], msg);
    if (n > 0) {
      size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
      ssize_t w = write(STDERR_FILENO, line, len);
      (void)w;
    }
  }
}

bool etr__env_flag_off(const char *v) {
  return v && (!strcmp(v, "0") || !strcasecmp(v, "off") || !strcasecmp(v, "false") ||
               !strcasecmp(v, "no"));
}

bool etr__env_flag_on(const char *v) {
  return v && (!strcmp(v, "1") || !strcasecmp(v, "on") || !strcasecmp(v, "true") ||
               !strcasecmp(v, "yes") || !strcasecmp(v, "all"));
}

bool etr__env_switch(const char *name, bool dflt) {
  const char *v = secure_getenv(name);
  if (!v || !*v) return dflt;
  if (etr__env_flag_on(v)) return true;
  if (etr__env_flag_off(v)) return false;
  etr__log(ETR_LOG_WARN, "%s=%s unknown (1, on, true, yes or 0, off, false, no); %s", name, v,
           dflt ? "on" : "off");
  return dflt;
}
