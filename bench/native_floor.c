/* The floor of any one-writer-thread ledger in CPython: a writer thread in C.
 *
 * Benchmark-only (bench/native.py builds and drives it; the product never loads it).
 * Callers hand it finished lines; its thread appends them with write(2) and syncs them
 * with one fdatasync(2) per batch without ever holding the GIL, and a caller waits for
 * its line with the GIL released. What is left of an append's cost is then the
 * interpreter's: the caller's per-line Python and getting the GIL back after each wait.
 *
 * Invariant: lines reach the file in submit order, each whole, and `wait(t)` returns
 * True only once every line up to ticket t was written and fdatasync'd. One writer at a
 * time per process (module state), which is all a benchmark needs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work = PTHREAD_COND_INITIALIZER;
static pthread_cond_t done = PTHREAD_COND_INITIALIZER;
static pthread_t thread;
static char *queued;           /* bytes handed in and not yet taken by the thread */
static size_t queued_len, queued_cap;
static long long submitted, durable, commits;
static int fd = -1, stopping, failed_errno;

static void *run(void *unused) {
    char *mine = NULL;
    size_t mine_cap = 0;
    (void)unused;
    for (;;) {
        pthread_mutex_lock(&mu);
        while (queued_len == 0 && !stopping)
            pthread_cond_wait(&work, &mu);
        if (queued_len == 0) {
            pthread_mutex_unlock(&mu);
            break;
        }
        /* Swap buffers so callers can queue the next batch while this one is written. */
        char *batch = queued;
        size_t len = queued_len, cap = queued_cap;
        queued = mine;
        queued_cap = mine_cap;
        queued_len = 0;
        long long upto = submitted;
        pthread_mutex_unlock(&mu);

        int err = 0;
        for (size_t off = 0; off < len && !err;) {
            ssize_t n = write(fd, batch + off, len - off);
            if (n < 0 && errno != EINTR)
                err = errno;
            else if (n > 0)
                off += (size_t)n;
        }
        if (!err && fdatasync(fd) != 0)
            err = errno;
        mine = batch;
        mine_cap = cap;

        pthread_mutex_lock(&mu);
        if (err)
            failed_errno = err; /* sticky: no later line may look durable */
        else if (!failed_errno)
            durable = upto;
        commits++;
        pthread_cond_broadcast(&done);
        pthread_mutex_unlock(&mu);
    }
    free(mine);
    return NULL;
}

static PyObject *nf_open(PyObject *self, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path))
        return NULL;
    if (fd >= 0) {
        PyErr_SetString(PyExc_RuntimeError, "a native writer is already open");
        return NULL;
    }
    int f = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (f < 0)
        return PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
    fd = f;
    stopping = failed_errno = 0;
    submitted = durable = commits = 0;
    int rc = pthread_create(&thread, NULL, run, NULL);
    if (rc != 0) {
        close(fd);
        fd = -1;
        errno = rc;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

/* Drain what is queued, stop the thread, close the file; return the number of syncs. */
static PyObject *nf_close(PyObject *self, PyObject *unused) {
    if (fd < 0) {
        PyErr_SetString(PyExc_RuntimeError, "no native writer is open");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&mu);
    stopping = 1;
    pthread_cond_signal(&work);
    pthread_mutex_unlock(&mu);
    pthread_join(thread, NULL);
    Py_END_ALLOW_THREADS
    close(fd);
    fd = -1;
    free(queued);
    queued = NULL;
    queued_len = queued_cap = 0;
    if (failed_errno) {
        errno = failed_errno;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLongLong(commits);
}

/* Queue one line (bytes, newline included); return its ticket. Never blocks on the disk. */
static PyObject *nf_submit(PyObject *self, PyObject *arg) {
    Py_buffer line;
    if (PyObject_GetBuffer(arg, &line, PyBUF_SIMPLE) != 0)
        return NULL;
    long long ticket = -1;
    pthread_mutex_lock(&mu);
    if (fd >= 0 && !stopping) {
        size_t need = queued_len + (size_t)line.len;
        char *grown = queued;
        if (need > queued_cap) {
            grown = realloc(queued, need * 2 + 4096);
            if (grown) {
                queued = grown;
                queued_cap = need * 2 + 4096;
            }
        }
        if (grown) {
            memcpy(queued + queued_len, line.buf, (size_t)line.len);
            queued_len = need;
            ticket = ++submitted;
            pthread_cond_signal(&work);
        }
    }
    pthread_mutex_unlock(&mu);
    PyBuffer_Release(&line);
    if (ticket < 0) {
        PyErr_SetString(PyExc_RuntimeError, "the native writer is closed or out of memory");
        return NULL;
    }
    return PyLong_FromLongLong(ticket);
}

/* Wait, GIL released, until ticket t is durable: True, or False after `timeout` s.
 * A failed write or sync raises OSError. */
static PyObject *nf_wait(PyObject *self, PyObject *args) {
    long long t;
    double timeout;
    if (!PyArg_ParseTuple(args, "Ld", &t, &timeout))
        return NULL;
    int ok, err;
    Py_BEGIN_ALLOW_THREADS
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    long long ns = deadline.tv_nsec + (long long)(timeout * 1e9);
    deadline.tv_sec += ns / 1000000000LL;
    deadline.tv_nsec = ns % 1000000000LL;
    pthread_mutex_lock(&mu);
    while (durable < t && !failed_errno)
        if (pthread_cond_timedwait(&done, &mu, &deadline) == ETIMEDOUT)
            break;
    ok = durable >= t;
    err = failed_errno;
    pthread_mutex_unlock(&mu);
    Py_END_ALLOW_THREADS
    if (!ok && err) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyBool_FromLong(ok);
}

static PyMethodDef methods[] = {
    {"open", nf_open, METH_VARARGS, "open(path): start a writer thread appending to path"},
    {"close", nf_close, METH_NOARGS, "close() -> syncs: drain, stop, close"},
    {"submit", nf_submit, METH_O, "submit(line) -> ticket"},
    {"wait", nf_wait, METH_VARARGS, "wait(ticket, timeout) -> durable"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "native_floor", NULL, -1, methods};

PyMODINIT_FUNC PyInit_native_floor(void) { return PyModule_Create(&module); }
