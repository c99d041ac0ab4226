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

/* ---------------------------------------------------------------------------------------------
 * Bound launchers: one callable per (function, config, parameter block, thread), made when a typed
 * kernel meets a new LaunchConfig. It holds what does not change between launches (the function,
 * the seven dimensions, the launch kind and its attribute array, the block's addresses, the offset
 * and C type of each value slot), so a launch passes only what does:
 *
 *     bound(config, stream, value0, value1, ...) -> CUresult, or
 *         BOUND_OTHER_THREAD (-1): called from another thread than the block's owner; nothing written
 *         BOUND_NEW_CONFIG (-2): config is not the one bound; nothing written
 *
 * Every value is converted and range-checked first (an exception and nothing written, nothing launched
 * when one is malformed); then all are written into the block and the driver is called. */
enum { BOUND_OTHER_THREAD = -1, BOUND_NEW_CONFIG = -2, BOUND_MAX_VALUES = 256 };
enum { VALUE_INT = 1, VALUE_UINT = 2, VALUE_F32 = 3, VALUE_F64 = 4, VALUE_BYTES = 5 };
enum { KIND_PLAIN = 0, KIND_PROGRAMMATIC = 1, KIND_ATTRIBUTES = 2 };

typedef struct {
    Py_ssize_t offset;
    Py_ssize_t size;
    int kind;
} value_slot_t;

typedef struct {
    int kind;
    void* fn;
    unsigned dims[7];
    void** params;
    char* storage;
    unsigned long owner;
    PyObject* config;            /* compared by identity; kept alive by the capsule's context */
    launch_attribute_t* attrs;   /* KIND_ATTRIBUTES: kept alive by the capsule's context */
    unsigned num_attrs;
    Py_ssize_t nvalues;
    value_slot_t slots[1];       /* nvalues entries (at least one allocated) */
} bound_t;

typedef union {
    unsigned char bytes[8];
    const char* data;            /* VALUE_BYTES: the argument's own buffer, alive during the call */
} value_t;

/* An OverflowError of CPython's integer conversion, said again with the value's index and slot. */
static int integer_overflow(Py_ssize_t index, const char* sign, Py_ssize_t size) {
    if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_OverflowError, "bound launch: value %zd does not fit a %d-bit %s slot", index,
                     (int)(size * 8), sign);
    }
    return 0;
}

static int convert_value(const value_slot_t* s, PyObject* v, Py_ssize_t index, value_t* out) {
    switch (s->kind) {
    case VALUE_INT: {
        long long x = PyLong_AsLongLong(v);  /* ints and __index__; floats are a TypeError */
        if (x == -1 && PyErr_Occurred()) return integer_overflow(index, "signed", s->size);
        int bits = (int)(s->size * 8);
        if (bits < 64 && (x < -(1LL << (bits - 1)) || x > (1LL << (bits - 1)) - 1)) {
            PyErr_Format(PyExc_OverflowError, "bound launch: value %zd = %lld does not fit a %d-bit signed slot",
                         index, x, bits);
            return 0;
        }
        if (s->size == 1) { signed char c = (signed char)x; memcpy(out->bytes, &c, 1); }
        else if (s->size == 2) { short c = (short)x; memcpy(out->bytes, &c, 2); }
        else if (s->size == 4) { int c = (int)x; memcpy(out->bytes, &c, 4); }
        else memcpy(out->bytes, &x, 8);
        return 1;
    }
    case VALUE_UINT: {
        unsigned long long x;
        if (PyLong_Check(v)) {
            x = PyLong_AsUnsignedLongLong(v);  /* negative or over 64 bits: OverflowError */
        } else {
            PyObject* i = PyNumber_Index(v);
            if (i == NULL) return 0;
            x = PyLong_AsUnsignedLongLong(i);
            Py_DECREF(i);
        }
        if (x == (unsigned long long)-1 && PyErr_Occurred()) return integer_overflow(index, "unsigned", s->size);
        int bits = (int)(s->size * 8);
        if (bits < 64 && x > (1ULL << bits) - 1) {
            PyErr_Format(PyExc_OverflowError, "bound launch: value %zd = %llu does not fit a %d-bit unsigned slot",
                         index, x, bits);
            return 0;
        }
        if (s->size == 1) { unsigned char c = (unsigned char)x; memcpy(out->bytes, &c, 1); }
        else if (s->size == 2) { unsigned short c = (unsigned short)x; memcpy(out->bytes, &c, 2); }
        else if (s->size == 4) { unsigned c = (unsigned)x; memcpy(out->bytes, &c, 4); }
        else memcpy(out->bytes, &x, 8);
        return 1;
    }
    case VALUE_F32: {
        double x = PyFloat_AsDouble(v);
        if (x == -1.0 && PyErr_Occurred()) return 0;
        float f = (float)x;
        if (x - x == 0.0 && f - f != 0.0) {  /* finite, rounded to an infinity: refused, as struct.pack('f') does */
            PyErr_Format(PyExc_OverflowError, "bound launch: value %zd does not fit a 32-bit float slot", index);
            return 0;
        }
        memcpy(out->bytes, &f, 4);
        return 1;
    }
    case VALUE_F64: {
        double x = PyFloat_AsDouble(v);
        if (x == -1.0 && PyErr_Occurred()) return 0;
        memcpy(out->bytes, &x, 8);
        return 1;
    }
    case VALUE_BYTES: {
        char* data;
        Py_ssize_t n;
        if (!PyBytes_Check(v)) {
            PyErr_Format(PyExc_TypeError, "bound launch: value %zd must be bytes", index);
            return 0;
        }
        if (PyBytes_AsStringAndSize(v, &data, &n) < 0) return 0;
        if (n != s->size) {
            PyErr_Format(PyExc_ValueError, "bound launch: value %zd has %zd bytes, its slot %zd", index, n, s->size);
            return 0;
        }
        out->data = data;
        return 1;
    }
    }
    PyErr_SetString(PyExc_SystemError, "bound launch: unknown slot kind");
    return 0;
}

static PyObject* bound_call(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
    bound_t* b = (bound_t*)PyCapsule_GetPointer(self, NULL);
    if (b == NULL) return NULL;
    if (nargs != 2 + b->nvalues) {
        PyErr_Format(PyExc_TypeError, "bound launch takes %zd arguments (config, stream and %zd values), received %zd",
                     2 + b->nvalues, b->nvalues, nargs);
        return NULL;
    }
    if (PyThread_get_thread_ident() != b->owner) return PyLong_FromLong(BOUND_OTHER_THREAD);
    if (args[0] != b->config) return PyLong_FromLong(BOUND_NEW_CONFIG);
    if ((b->kind == KIND_PLAIN ? (void*)g_launch : (void*)g_launch_ex) == NULL) {  /* before anything is written */
        PyErr_SetString(PyExc_RuntimeError, b->kind == KIND_PLAIN ? "bound launch: cuLaunchKernel entry point not set"
                                                                   : "bound launch: cuLaunchKernelEx entry point not set");
        return NULL;
    }
    void* stream = PyLong_AsVoidPtr(args[1]);
    if (stream == NULL && PyErr_Occurred()) return NULL;
    value_t values[BOUND_MAX_VALUES];
    for (Py_ssize_t i = 0; i < b->nvalues; ++i)
        if (!convert_value(&b->slots[i], args[2 + i], i, &values[i])) return NULL;
    for (Py_ssize_t i = 0; i < b->nvalues; ++i) {
        const value_slot_t* s = &b->slots[i];
        memcpy(b->storage + s->offset, s->kind == VALUE_BYTES ? values[i].data : (const char*)values[i].bytes,
               (size_t)s->size);
    }
    const unsigned* d = b->dims;
    if (b->kind == KIND_PLAIN)
        return PyLong_FromLong(g_launch(b->fn, d[0], d[1], d[2], d[3], d[4], d[5], d[6], stream, b->params, NULL));
    launch_attribute_t attr;
    launch_config_t config = {d[0], d[1], d[2], d[3], d[4], d[5], d[6], stream, b->attrs, b->num_attrs};
    if (b->kind == KIND_PROGRAMMATIC) {
        memset(&attr, 0, sizeof attr);
        attr.id = ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmatic_stream_serialization_allowed = 1;
        config.attrs = &attr;
        config.num_attrs = 1;
    }
    return PyLong_FromLong(g_launch_ex(&config, b->fn, b->params, NULL));
}

static PyMethodDef bound_def = {"bound_launch", (PyCFunction)(void (*)(void))bound_call, METH_FASTCALL,
                                "bound(config, stream, *values) -> CUresult, -1 (another thread) or -2 (another config)"};

static void bound_free(PyObject* capsule) {
    PyObject* keep = (PyObject*)PyCapsule_GetContext(capsule);
    PyErr_Clear();  /* a destructor never raises */
    Py_XDECREF(keep);
    void* b = PyCapsule_GetPointer(capsule, NULL);
    PyErr_Clear();
    PyMem_Free(b);
}

/* rebind_config(launcher, config): the bound launcher answers to config (an object equal to the one it
 * was bound to) from now on; it holds config instead of its former config object. */
static PyObject* rebind_config(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "rebind_config takes 2 arguments (launcher, config)");
        return NULL;
    }
    PyObject* capsule = PyCFunction_Check(args[0]) && PyCFunction_GetFunction(args[0]) == (PyCFunction)(void (*)(void))bound_call
                        ? PyCFunction_GetSelf(args[0]) : NULL;
    if (capsule == NULL || PyCapsule_GetDestructor(capsule) != bound_free) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "rebind_config: expected a launcher made by bind_launch");
        return NULL;
    }
    bound_t* b = (bound_t*)PyCapsule_GetPointer(capsule, NULL);
    PyObject* held = (PyObject*)PyCapsule_GetContext(capsule);
    if (b == NULL || held == NULL) return NULL;
    PyObject* keep = PyTuple_GetItem(held, 1);
    if (keep == NULL) return NULL;
    PyObject* now = PyTuple_Pack(2, args[1], keep);
    if (now == NULL) return NULL;
    if (PyCapsule_SetContext(capsule, now) < 0) {
        Py_DECREF(now);
        return NULL;
    }
    b->config = args[1];
    Py_DECREF(held);
    Py_RETURN_NONE;
}

/* bind_launch(kind, function, dims, params, storage, owner, config, attrs, num_attrs, slots, keep)
 *   kind: 0 cuLaunchKernel, 1 cuLaunchKernelEx with programmatic stream serialization, 2 cuLaunchKernelEx
 *   with the attribute array at attrs (num_attrs entries); dims: 7 ints (grid, block, shared bytes);
 *   params: the void** array; storage: the block's base; owner: the thread ident allowed to launch;
 *   slots: ((offset, kind, size), ...) of each value, kind 1 signed, 2 unsigned (size 1/2/4/8),
 *   3 f32, 4 f64, 5 bytes; keep: an object held as long as the launcher (config, attrs, block).
 * Returns the bound launcher (see above). Every argument is checked here, once. */
static PyObject* bind_launch(PyObject* self, PyObject* args) {
    int kind;
    PyObject *fn_o, *dims_o, *params_o, *storage_o, *owner_o, *config, *attrs_o, *slots_o, *keep;
    unsigned long num_attrs;
    if (!PyArg_ParseTuple(args, "iOOOOOOOkOO", &kind, &fn_o, &dims_o, &params_o, &storage_o, &owner_o, &config,
                          &attrs_o, &num_attrs, &slots_o, &keep))
        return NULL;
    if (kind < KIND_PLAIN || kind > KIND_ATTRIBUTES) {
        PyErr_Format(PyExc_ValueError, "bind_launch: kind %d is not 0, 1 or 2", kind);
        return NULL;
    }
    if (!PyTuple_Check(dims_o) || PyTuple_Size(dims_o) != 7 || !PyTuple_Check(slots_o)) {
        PyErr_SetString(PyExc_TypeError, "bind_launch: dims must be a tuple of 7 ints and slots a tuple");
        return NULL;
    }
    Py_ssize_t n = PyTuple_Size(slots_o);
    if (n > BOUND_MAX_VALUES) {
        PyErr_Format(PyExc_ValueError, "bind_launch: at most %d values, received %zd", BOUND_MAX_VALUES, n);
        return NULL;
    }
    if (kind == KIND_ATTRIBUTES && (num_attrs > 64 || (num_attrs && PyLong_AsVoidPtr(attrs_o) == NULL))) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "bind_launch: expected an attribute array of at most 64 entries");
        return NULL;
    }
    bound_t* b = (bound_t*)PyMem_Calloc(1, sizeof(bound_t) + (size_t)(n > 0 ? n - 1 : 0) * sizeof(value_slot_t));
    if (b == NULL) return PyErr_NoMemory();
    static const char* const dim_names[7] = {"gx", "gy", "gz", "bx", "by", "bz", "shared_bytes"};
    b->kind = kind;
    b->fn = PyLong_AsVoidPtr(fn_o);
    for (int i = 0; i < 7 && !PyErr_Occurred(); ++i) {
        unsigned long v = PyLong_AsUnsignedLong(PyTuple_GetItem(dims_o, i));
        if (v > UINT_MAX && !PyErr_Occurred())
            PyErr_Format(PyExc_OverflowError, "bind_launch: %s = %lu does not fit the driver's 32-bit unsigned int",
                         dim_names[i], v);
        b->dims[i] = (unsigned)v;
    }
    if (!PyErr_Occurred()) b->params = (void**)PyLong_AsVoidPtr(params_o);
    if (!PyErr_Occurred()) b->storage = (char*)PyLong_AsVoidPtr(storage_o);
    if (!PyErr_Occurred()) b->owner = PyLong_AsUnsignedLong(owner_o);
    if (!PyErr_Occurred() && kind == KIND_ATTRIBUTES) {
        b->attrs = (launch_attribute_t*)PyLong_AsVoidPtr(attrs_o);
        b->num_attrs = (unsigned)num_attrs;
    }
    b->config = config;
    b->nvalues = n;
    for (Py_ssize_t i = 0; i < n && !PyErr_Occurred(); ++i) {
        PyObject* t = PyTuple_GetItem(slots_o, i);
        long offset = -1, vkind = 0, size = 0;
        if (t != NULL && PyTuple_Check(t) && PyTuple_Size(t) == 3) {
            offset = PyLong_AsLong(PyTuple_GetItem(t, 0));
            vkind = PyLong_AsLong(PyTuple_GetItem(t, 1));
            size = PyLong_AsLong(PyTuple_GetItem(t, 2));
        }
        if (PyErr_Occurred()) break;
        int scalar_ok = (vkind == VALUE_INT || vkind == VALUE_UINT) ? (size == 1 || size == 2 || size == 4 || size == 8)
                        : vkind == VALUE_F32 ? size == 4 : vkind == VALUE_F64 ? size == 8 : vkind == VALUE_BYTES ? size > 0 : 0;
        if (offset < 0 || !scalar_ok) {
            PyErr_Format(PyExc_ValueError, "bind_launch: slot %zd must be (offset >= 0, kind 1-5, a size the kind takes)", i);
            break;
        }
        b->slots[i].offset = offset;
        b->slots[i].kind = (int)vkind;
        b->slots[i].size = size;
    }
    if (!PyErr_Occurred() && n && b->storage == NULL)
        PyErr_SetString(PyExc_ValueError, "bind_launch: a block with values needs its storage address");
    if (PyErr_Occurred()) {
        PyMem_Free(b);
        return NULL;
    }
    PyObject* capsule = PyCapsule_New(b, NULL, bound_free);
    if (capsule == NULL) {
        PyMem_Free(b);
        return NULL;
    }
    PyObject* held = PyTuple_Pack(2, config, keep);
    if (held == NULL || PyCapsule_SetContext(capsule, held) < 0) {
        Py_XDECREF(held);
        Py_DECREF(capsule);  /* frees b */
        return NULL;
    }
    PyObject* fn = PyCFunction_NewEx(&bound_def, capsule, NULL);
    Py_DECREF(capsule);
    return fn;
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
    {"rebind_config", (PyCFunction)(void (*)(void))rebind_config, METH_FASTCALL,
     "rebind_config(launcher, config): the bound launcher answers to config"},
    {"bind_launch", bind_launch, METH_VARARGS,
     "bind_launch(kind, function, dims, params, storage, owner, config, attrs, num_attrs, slots, keep) -> launcher"},
    {"graph_launch", (PyCFunction)(void (*)(void))graph_launch, METH_FASTCALL, "cuGraphLaunch"},
    {"event_record", (PyCFunction)(void (*)(void))event_record, METH_FASTCALL, "cuEventRecord"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hotpath", NULL, -1, methods};

PyMODINIT_FUNC PyInit__hotpath(void) {
    PyObject* m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "BOUND_OTHER_THREAD", BOUND_OTHER_THREAD) < 0 ||
        PyModule_AddIntConstant(m, "BOUND_NEW_CONFIG", BOUND_NEW_CONFIG) < 0 ||
        PyModule_AddIntConstant(m, "BOUND_MAX_VALUES", BOUND_MAX_VALUES) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
