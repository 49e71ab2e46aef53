#include "fuzz.h"

#include "lib/base/index.h"

#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

const char *fuzz_memfile(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("tpshard-fuzz", MFD_CLOEXEC);
        if (fd < 0) return NULL;
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0) return NULL;
    size_t done = 0;
    while (done < size) {
        ssize_t w = pwrite(fd, data + done, size - done, (off_t)done);
        if (w <= 0) return NULL;
        done += (size_t)w;
    }
    return path;
}

void fuzz_read_ends(const struct tps_index *ix)
{
    tps_error err;
    for (size_t i = 0; i < ix->ntensors && i < 64; i++) {
        const tps_tensor *t = &ix->tensors[i];
        unsigned char buf[64];
        size_t n = t->nbytes < sizeof buf ? (size_t)t->nbytes : sizeof buf;
        tps_error_clear(&err);
        tps_tensor_read(ix, t, 0, buf, n, &err);
        if (t->nbytes > n) {
            tps_error_clear(&err);
            tps_tensor_read(ix, t, t->nbytes - n, buf, n, &err);
        }
    }
}
