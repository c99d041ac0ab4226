/* The launch hot path: driver entry points called with no Python-level argument conversion.
 *
 * The module never links against libcuda: mircuda._cuda hands it the entry points it obtained with
 * cuGetProcAddress, so this binary builds and imports on machines without a driver (CI) and uses the
 * exact versioned entry points the driver chose. Built against the stable ABI (abi3, Python >= 3.10),
 * so one binary serves every later CPython. Without it mircuda falls back to ctypes (slower by ~2 us
 * per call on an H200 host). */
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030A0000
#endif
#include <Python.h>
#include <limits.h>
#include <string.h>

typedef int (*launch_t)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        void*, void**, void**);
typedef int (*two_ptr_t)(void*, void*);

/* cuLaunchKernelEx's configuration, laid out as cuda.h (CUDA >= 12) declares CUlaunchConfig and
 * CUlaunchAttribute: the attribute's 4-byte id, padding to 8, a 64-byte value union. */
typedef struct {
    unsigned id;
    char pad[4];
    union {
        char bytes[64];
        int programmatic_stream_serialization_allowed;
        void* align;
    } value;
} launch_attribute_t;
/* cuda.h: sizeof(CUlaunchAttribute) == 72 (tests/test_hotpath.py compares with cuda.bindings). */
typedef char launch_attribute_size_check[sizeof(launch_attribute_t) == 72 ? 1 : -1];
typedef struct {
    unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes;
    void* stream;
    launch_attribute_t* attrs;
    unsigned num_attrs;
} launch_config_t;
typedef int (*launch_ex_t)(const launch_config_t*, void*, void**, void**);
enum { ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6 };

static launch_t g_launch = NULL;
static launch_ex_t g_launch_ex = NULL;
static two_ptr_t g_graph_launch = NULL;
static two_ptr_t g_event_record = NULL;

static PyObject* set_entry_points(PyObject* self, PyObject* args) {
    PyObject *a, *b, *c;
    if (!PyArg_ParseTuple(args, "OOO", &a, &b, &c)) return NULL;
    void* pa = PyLong_AsVoidPtr(a);
    void* pb = PyLong_AsVoidPtr(b);
    void* pc = PyLong_AsVoidPtr(c);
    if (PyErr_Occurred()) return NULL;
    g_launch = (launch_t)pa;
    g_graph_launch = (two_ptr_t)pb;
    g_event_record = (two_ptr_t)pc;
    Py_RETURN_NONE;
}

/* The ten arguments of both launch functions: (function, gx, gy, gz, bx, by, bz, shared_bytes,
 * stream, params). Returns 0 with a Python exception set when they are malformed. */
typedef struct {
    void* fn;
    unsigned dims[7];
    void* stream;
    void** params;
} launch_args_t;

static int parse_launch(const char* name, const void* entry, PyObject* const* args, Py_ssize_t nargs,
                        launch_args_t* out) {
    if (nargs != 10) {
        PyErr_Format(PyExc_TypeError, "%s takes 10 arguments", name);
        return 0;
    }
    if (entry == NULL) {
        PyErr_Format(PyExc_RuntimeError, "%s: driver entry point not set", name);
        return 0;
    }
    static const char* const dim_names[7] = {"gx", "gy", "gz", "bx", "by", "bz", "shared_bytes"};
    out->fn = PyLong_AsVoidPtr(args[0]);
    for (int i = 0; i < 7; ++i) {
        unsigned long v = PyLong_AsUnsignedLong(args[1 + i]);
        if (v > UINT_MAX && !PyErr_Occurred()) {  /* unsigned long is 64-bit: refuse, never truncate */
            PyErr_Format(PyExc_OverflowError, "%s: %s = %lu does not fit the driver's 32-bit unsigned int", name,
                         dim_names[i], v);
            return 0;
        }
        out->dims[i] = (unsigned)v;
    }
    out->stream = PyLong_AsVoidPtr(args[8]);
    out->params = (void**)PyLong_AsVoidPtr(args[9]);
    return !PyErr_Occurred();
}

/* launch_kernel(function, gx, gy, gz, bx, by, bz, shared_bytes, stream, params) -> CUresult */
static PyObject* launch_kernel(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
    launch_args_t a;
    if (!parse_launch("launch_kernel", (const void*)g_launch, args, nargs, &a)) return NULL;
    const unsigned* d = a.dims;
    return PyLong_FromLong(g_launch(a.fn, d[0], d[1], d[2], d[3], d[4], d[5], d[6], a.stream, a.params, NULL));
}

static PyObject* set_launch_ex(PyObject* self, PyObject* arg) {
    void* p = PyLong_AsVoidPtr(arg);
    if (PyErr_Occurred()) return NULL;
    g_launch_ex = (launch_ex_t)p;
    Py_RETURN_NONE;
}

/* launch_kernel_programmatic(function, gx, gy, gz, bx, by, bz, shared_bytes, stream, params) -> CUresult:
 * cuLaunchKernelEx with programmatic stream serialization allowed (programmatic dependent launch). */
static PyObject* launch_kernel_programmatic(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
    launch_args_t a;
    if (!parse_launch("launch_kernel_programmatic", (const void*)g_launch_ex, args, nargs, &a)) return NULL;
    launch_attribute_t attr;
    memset(&attr, 0, sizeof attr);
    attr.id = ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmatic_stream_serialization_allowed = 1;
    const unsigned* d = a.dims;
    launch_config_t config = {d[0], d[1], d[2], d[3], d[4], d[5], d[6], a.stream, &attr, 1};
    return PyLong_FromLong(g_launch_ex(&config, a.fn, a.params, NULL));
}

/* launch_kernel_attrs(attrs, num_attrs, function, gx, gy, gz, bx, by, bz, shared_bytes, stream, params)
 * -> CUresult: cuLaunchKernelEx with an attribute array the caller built (cooperative, cluster
 * dimensions, programmatic stream serialization ...) and keeps alive; attrs is its address. The
 * attribute arguments come first so that functools.partial can bind them once per LaunchConfig. */
static PyObject* launch_kernel_attrs(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 12) {
        PyErr_SetString(PyExc_TypeError, "launch_kernel_attrs takes 12 arguments");
        return NULL;
    }
    launch_attribute_t* attrs = (launch_attribute_t*)PyLong_AsVoidPtr(args[0]);
    unsigned long count = PyLong_AsUnsignedLong(args[1]);
    if (PyErr_Occurred()) return NULL;
    if (count > 64 || (count && attrs == NULL)) {
        PyErr_SetString(PyExc_ValueError, "launch_kernel_attrs: expected an attribute array of at most 64 entries");
        return NULL;
    }
    launch_args_t a;
    if (!parse_launch("launch_kernel_attrs", (const void*)g_launch_ex, args + 2, nargs - 2, &a)) return NULL;
    const unsigned* d = a.dims;
    launch_config_t config = {d[0], d[1], d[2], d[3], d[4], d[5], d[6], a.stream, attrs, (unsigned)count};
    return PyLong_FromLong(g_launch_ex(&config, a.fn, a.params, NULL));
}

static PyObject* call_two(two_ptr_t f, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "expected 2 arguments");
        return NULL;
    }
    if (f == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "driver entry points not set");
        return NULL;
    }
    void* a = PyLong_AsVoidPtr(args[0]);
    void* b = PyLong_AsVoidPtr(args[1]);
    if (PyErr_Occurred()) return NULL;
    return PyLong_FromLong(f(a, b));
}

/* graph_launch(graph_exec, stream) -> CUresult */
static PyObject* graph_launch(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
    return call_two(g_graph_launch, args, nargs);
}

/* event_record(event, stream) -> CUresult */
static PyObject* event_record(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
    return call_two(g_event_record, args, nargs);
}

static PyMethodDef methods[] = {
    {"set_entry_points", set_entry_points, METH_VARARGS, "set_entry_points(cuLaunchKernel, cuGraphLaunch, cuEventRecord)"},
    {"set_launch_ex", set_launch_ex, METH_O, "set_launch_ex(cuLaunchKernelEx)"},
    {"launch_kernel_programmatic", (PyCFunction)(void (*)(void))launch_kernel_programmatic, METH_FASTCALL,
     "cuLaunchKernelEx with programmatic stream serialization"},
    {"launch_kernel_attrs", (PyCFunction)(void (*)(void))launch_kernel_attrs, METH_FASTCALL,
     "cuLaunchKernelEx with a caller-built attribute array"},
    {"launch_kernel", (PyCFunction)(void (*)(void))launch_kernel, METH_FASTCALL, "cuLaunchKernel"},
    {"graph_launch", (PyCFunction)(void (*)(void))graph_launch, METH_FASTCALL, "cuGraphLaunch"},
    {"event_record", (PyCFunction)(void (*)(void))event_record, METH_FASTCALL, "cuEventRecord"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hotpath", NULL, -1, methods};

PyMODINIT_FUNC PyInit__hotpath(void) { return PyModule_Create(&module); }
