#include "core/mapfile.h"
#include "larql/mapfault.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Opens path, which must be a regular file: *fd and its size (an empty file is closed at
 * once: *fd = -1, *size = 0). */
static int open_regular(const char *path, int *fd, size_t *size, lq_err *err)
{
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0)
        return lq_err_set(err, errno == ENOENT ? LQ_ENOTFOUND : LQ_EIO, "%s: cannot open: %s", path,
                          strerror(errno));
    struct stat st;
    if (fstat(*fd, &st) != 0) {
        int e = errno;
        close(*fd);
        return lq_err_set(err, LQ_EIO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(*fd);
        return lq_err_set(err, LQ_EIO, "%s: not a regular file", path);
    }
    *size = (size_t)st.st_size;
    if (*size == 0) {
        close(*fd);
        *fd = -1;
    }
    return LQ_OK;
}

/* ---- the live file mappings, for lq_mapfault_recover ----
 * A fixed table written under a mutex and read by the SIGBUS path with atomic loads only
 * (no lock, no allocation: a signal handler may run on any thread, inside malloc). A slot
 * is published end first, start last, and retired start first, so the handler never sees a
 * start without its end. Mappings beyond the table are simply not covered (a SIGBUS there
 * keeps its default action). */
#define WATCH_MAX 1024
static uintptr_t watch_lo[WATCH_MAX], watch_hi[WATCH_MAX];
static pthread_mutex_t watch_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t watch_faults;
static long watch_page;

static void watch_add(const void *p, size_t n)
{
    pthread_mutex_lock(&watch_mu);
    if (!watch_page)
        watch_page = sysconf(_SC_PAGESIZE);
    for (int i = 0; i < WATCH_MAX; i++) {
        if (!__atomic_load_n(&watch_lo[i], __ATOMIC_RELAXED)) {
            __atomic_store_n(&watch_hi[i], (uintptr_t)p + n, __ATOMIC_RELEASE);
            __atomic_store_n(&watch_lo[i], (uintptr_t)p, __ATOMIC_RELEASE);
            break;
        }
    }
    pthread_mutex_unlock(&watch_mu);
}

static void watch_remove(const void *p)
{
    pthread_mutex_lock(&watch_mu);
    for (int i = 0; i < WATCH_MAX; i++)
        if (__atomic_load_n(&watch_lo[i], __ATOMIC_RELAXED) == (uintptr_t)p) {
            __atomic_store_n(&watch_lo[i], 0, __ATOMIC_RELEASE);
            break;
        }
    pthread_mutex_unlock(&watch_mu);
}

int lq_mapfault_recover(void *addr)
{
    uintptr_t a = (uintptr_t)addr;
    long page = __atomic_load_n(&watch_page, __ATOMIC_ACQUIRE);
    if (page <= 0)
        return 0;
    for (int i = 0; i < WATCH_MAX; i++) {
        uintptr_t lo = __atomic_load_n(&watch_lo[i], __ATOMIC_ACQUIRE);
        if (!lo || a < lo || a >= __atomic_load_n(&watch_hi[i], __ATOMIC_ACQUIRE))
            continue;
        /* a private zero page in place of the vanished one: the faulting read is retried on
         * return from the handler and now succeeds */
        void *pg = (void *)(a & ~(uintptr_t)(page - 1));
        /* (for cppcheck: fd -1 is what MAP_ANONYMOUS takes, and the page is owned by the file's
         * mapping, unmapped with it by lq_mapfile_close) */
        /* cppcheck-suppress invalidFunctionArg */
        /* cppcheck-suppress leakReturnValNotUsed */
        if (mmap(pg, (size_t)page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
            return 0;
        __atomic_add_fetch(&watch_faults, 1, __ATOMIC_RELAXED);
        return 1;
    }
    return 0;
}

uint64_t lq_mapfault_count(void)
{
    return __atomic_load_n(&watch_faults, __ATOMIC_RELAXED);
}

int lq_mapfile_open(lq_mapfile *m, const char *path, lq_err *err)
{
    m->data = NULL;
    m->size = 0;
    m->mapped = 0;
    int fd;
    size_t size;
    int rc = open_regular(path, &fd, &size, err);
    if (rc || fd < 0)
        return rc;
    void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED)
        return lq_err_set(err, LQ_EIO, "%s: mmap failed: %s", path, strerror(e));
    m->data = p;
    m->size = size;
    watch_add(p, size);
    return LQ_OK;
}

void lq_mapfile_close(lq_mapfile *m)
{
    if (m && m->data) {
        if (!m->mapped)
            watch_remove(m->data);
        munmap((void *)m->data, m->mapped ? m->mapped : m->size);
    }
    if (m) {
        m->data = NULL;
        m->size = 0;
        m->mapped = 0;
    }
}

void *lq_huge_alloc(size_t bytes, size_t *mapped)
{
    const size_t huge = (size_t)2 << 20;
    if (bytes == 0 || bytes > SIZE_MAX - huge)
        return NULL;
    size_t total = (bytes + huge - 1) / huge * huge;
    /* fd -1 is what MAP_ANONYMOUS takes (cppcheck does not know) */
    /* cppcheck-suppress invalidFunctionArg */
    void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, total, MADV_HUGEPAGE);
#endif
    *mapped = total;
    return p;
}

void lq_huge_free(void *p, size_t mapped)
{
    if (p)
        munmap(p, mapped);
}

int lq_mapfile_open_copy(lq_mapfile *m, const char *path, const int *cancel, lq_err *err)
{
    m->data = NULL;
    m->size = 0;
    m->mapped = 0;
    int fd;
    size_t size, mapped = 0;
    int rc = open_regular(path, &fd, &size, err);
    if (rc || fd < 0)
        return rc;
    uint8_t *p = lq_huge_alloc(size, &mapped);
    if (!p) {
        close(fd);
        return lq_err_set(err, LQ_ENOMEM, "%s: cannot map %zu bytes for the huge-page copy", path,
                          size);
    }
    size_t got = 0;
    while (got < size) {
        if (cancel && __atomic_load_n(cancel, __ATOMIC_ACQUIRE)) {
            close(fd);
            lq_huge_free(p, mapped);
            return lq_err_set(err, LQ_ECANCELED, "%s: copy canceled", path);
        }
        size_t chunk = size - got < ((size_t)64 << 20) ? size - got : ((size_t)64 << 20);
        ssize_t n = read(fd, p + got, chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    if (got != size) {
        lq_huge_free(p, mapped);
        return lq_err_set(err, LQ_EIO, "%s: short read (%zu of %zu bytes)", path, got, size);
    }
    mprotect(p, mapped, PROT_READ);
    m->data = p;
    m->size = size;
    m->mapped = mapped;
    return LQ_OK;
}

int lq_want_huge_copy(int mode, uint64_t bytes)
{
    const char *env = getenv("LQ_HUGEPAGES");
    if (env && *env)
        return atoi(env) != 0;
    if (mode)
        return mode > 0;
    return bytes >= ((uint64_t)64 << 20);
}

