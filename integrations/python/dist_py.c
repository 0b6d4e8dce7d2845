/* The rank and process groups of a distributed run for Python (dist_py.h): thin wrappers of
 * etr/dist.h. etr.torch.trace fills them from torch.distributed when it is initialized. */
#define PY_SSIZE_T_CLEAN
#include "dist_py.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "etr/etr.h"

#define ETR__STR2(x) #x
#define ETR__STR(x) ETR__STR2(x)

static PyObject *(*g_fail)(int rc, const char *what);

void etr_py_dist_init(PyObject *(*fail)(int rc, const char *what)) { g_fail = fail; }

PyObject *etr_py_set_rank(PyObject *m, PyObject *args) {
  (void)m;
  long long rank, world;
  if (!PyArg_ParseTuple(args, "LL:set_rank", &rank, &world)) return NULL;
  if (rank < 0 || world <= 0 || rank >= world)
    return PyErr_Format(PyExc_ValueError, "set_rank(%lld, %lld): needs 0 <= rank < world_size",
                        rank, world);
  int rc = etr_dist_set_rank(rank, world);
  return rc ? g_fail(rc, "set_rank") : Py_NewRef(Py_None);
}

/* A str argument as UTF-8 with no NUL inside (C strings), or NULL with an exception. */
static const char *c_str(PyObject *o, const char *what) {
  if (!PyUnicode_Check(o))
    return PyErr_Format(PyExc_TypeError, "%s must be a str, not %.100s", what, Py_TYPE(o)->tp_name),
           NULL;
  Py_ssize_t n;
  const char *s = PyUnicode_AsUTF8AndSize(o, &n);
  if (s && (Py_ssize_t)strlen(s) != n)
    return PyErr_Format(PyExc_ValueError, "%s holds a NUL character", what), NULL;
  return s;
}

PyObject *etr_py_declare_group(PyObject *m, PyObject *args, PyObject *kw) {
  (void)m;
  static char *kwlist[] = {"name", "ranks", "desc", "backend", NULL};
  PyObject *name, *ranks = Py_None, *desc = NULL, *backend = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O$OO:declare_group", kwlist, &name, &ranks, &desc,
                                   &backend))
    return NULL;
  etr_process_group pg = ETR_PROCESS_GROUP_INIT;
  if (!(pg.name = c_str(name, "name"))) return NULL;
  if (!pg.name[0]) return PyErr_Format(PyExc_ValueError, "declare_group: an empty name");
  if (desc && desc != Py_None && !(pg.desc = c_str(desc, "desc"))) return NULL;
  if (backend && backend != Py_None && !(pg.backend = c_str(backend, "backend"))) return NULL;
  int64_t *r = NULL;
  if (ranks != Py_None) { /* (None: every rank of the world) */
    PyObject *seq = PySequence_Fast(ranks, "ranks must be a sequence of ints");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > UINT32_MAX || !(r = malloc((size_t)(n ? n : 1) * sizeof *r))) {
      Py_DECREF(seq);
      return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
      long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
      if (v == -1 && PyErr_Occurred()) {
        free(r);
        Py_DECREF(seq);
        return NULL;
      }
      if (v < 0) {
        free(r);
        Py_DECREF(seq);
        return PyErr_Format(PyExc_ValueError, "declare_group: rank %lld < 0", v);
      }
      r[i] = v;
    }
    Py_DECREF(seq);
    pg.ranks = r;
    pg.n_ranks = (uint32_t)n;
    if (n == 0) {
      free(r);
      return PyErr_Format(PyExc_ValueError, "declare_group: an empty rank list (None: all)");
    }
  }
  int rc = etr_dist_declare_group(&pg);
  free(r);
  if (rc == ETR_ENOSPC) /* (the error's own text speaks of observer slots) */
    return g_fail(rc, "declare_group: at most " ETR__STR(
                          ETR_DIST_MAX_GROUPS) " groups are kept (ETR_DIST_MAX_GROUPS)");
  return rc ? g_fail(rc, "declare_group") : Py_NewRef(Py_None);
}

PyObject *etr_py_record_groups(PyObject *m, PyObject *unused) {
  (void)m;
  (void)unused;
  int rc = etr_dist_record_groups();
  return rc ? g_fail(rc, "record_groups") : Py_NewRef(Py_None);
}

PyObject *etr_py_rank(PyObject *m, PyObject *unused) {
  (void)m;
  (void)unused;
  return PyLong_FromLongLong(etr_dist_rank());
}

PyObject *etr_py_world_size(PyObject *m, PyObject *unused) {
  (void)m;
  (void)unused;
  return PyLong_FromLongLong(etr_dist_world_size());
}
