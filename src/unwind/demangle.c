/* C++ demangling without a C++ dependency: __cxa_demangle from the process, else from a
 * libstdc++ loaded privately (kept for the process's lifetime). unwind.h. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "unwind/unwind.h"

typedef char *(*demangle_fn)(const char *, char *, size_t *, int *);
static demangle_fn g_demangle;
static pthread_once_t g_demangle_once = PTHREAD_ONCE_INIT;

static void demangle_init(void) {
  void *f = dlsym(RTLD_DEFAULT, "__cxa_demangle");
  if (f == NULL) {
    void *h = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL);
    if (h != NULL) f = dlsym(h, "__cxa_demangle");
  }
  /* Casting a data pointer to a function pointer, as dlsym requires. */
  memcpy(&g_demangle, &f, sizeof f);
}

char *etr__demangle(const char *mangled) {
  if (mangled == NULL || mangled[0] != '_' || mangled[1] != 'Z') return NULL;
  pthread_once(&g_demangle_once, demangle_init);
  if (g_demangle == NULL) return NULL;
  int status = -1;
  char *d = g_demangle(mangled, NULL, NULL, &status);
  if (d != NULL && status == 0) return d;
  free(d);
  return NULL;
}
