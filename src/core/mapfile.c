#include "core/mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int lq_mapfile_open(lq_mapfile *m, const char *path, lq_err *err)
{
    m->data = NULL;
    m->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return lq_err_set(err, errno == ENOENT ? LQ_ENOTFOUND : LQ_EIO, "%s: cannot open: %s", path,
                          strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return lq_err_set(err, LQ_EIO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return lq_err_set(err, LQ_EIO, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return LQ_OK;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED)
        return lq_err_set(err, LQ_EIO, "%s: mmap failed: %s", path, strerror(e));
    m->data = p;
    m->size = (size_t)st.st_size;
    return LQ_OK;
}

void lq_mapfile_close(lq_mapfile *m)
{
    if (m && m->data)
        munmap((void *)m->data, m->size);
    if (m) {
        m->data = NULL;
        m->size = 0;
    }
}

void lq_mapfile_advise_willneed(const lq_mapfile *m)
{
    if (m && m->data)
        madvise((void *)m->data, m->size, MADV_WILLNEED);
}
