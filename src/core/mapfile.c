#include "core/mapfile.h"

#include <errno.h>
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
    return LQ_OK;
}

void lq_mapfile_close(lq_mapfile *m)
{
    if (m && m->data)
        munmap((void *)m->data, m->mapped ? m->mapped : m->size);
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

int lq_mapfile_open_copy(lq_mapfile *m, const char *path, lq_err *err)
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
        ssize_t n = read(fd, p + got, size - got);
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

void lq_mapfile_advise_willneed(const lq_mapfile *m)
{
    if (m && m->data)
        madvise((void *)m->data, m->size, MADV_WILLNEED);
}
