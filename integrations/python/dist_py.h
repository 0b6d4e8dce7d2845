/* The rank and process groups of a distributed run (etr/dist.h) for Python: _etr.set_rank,
 * _etr.declare_group, _etr.record_groups, _etr.rank, _etr.world_size (dist_py.c). */
#ifndef ETR_PY_DIST_H
#define ETR_PY_DIST_H

#include <Python.h>

/* (each raises through fail(rc, what) on an etr error) */
PyObject *etr_py_set_rank(PyObject *m, PyObject *args);
PyObject *etr_py_declare_group(PyObject *m, PyObject *args, PyObject *kw);
PyObject *etr_py_record_groups(PyObject *m, PyObject *unused);
PyObject *etr_py_rank(PyObject *m, PyObject *unused);
PyObject *etr_py_world_size(PyObject *m, PyObject *unused);
/* Set once at import: how an etr error becomes a Python exception. */
void etr_py_dist_init(PyObject *(*fail)(int rc, const char *what));

#endif
