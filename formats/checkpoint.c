#include "checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "npy.h"
#include "safetensors.h"
#include "torch.h"

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static bool is_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static tps_status open_file(const char *path, tps_index **out, tps_error *err)
{
    if (ends_with(path, ".safetensors.index.json")) return tps_safetensors_index_open(path, out, err);
    if (ends_with(path, ".bin.index.json")) return tps_torch_index_open(path, out, err);
    unsigned char magic[8] = {0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return tps_fail(err, e == ENOENT ? TPS_EINVALID : TPS_EIO, "%s: cannot open: %s", path, strerror(e));
    }
    ssize_t n = read(fd, magic, sizeof magic);
    struct stat sb;
    uint64_t size = fstat(fd, &sb) == 0 ? (uint64_t)sb.st_size : 0;
    close(fd);
    if (n >= 4 && memcmp(magic, "PK\3\4", 4) == 0) return tps_zip_checkpoint_open(path, out, err);
    if (n >= 6 && memcmp(magic, "\x93NUMPY", 6) == 0) return tps_npy_open(path, out, err);
    if (n > 0 && tps_torch_is_pickle_magic(magic, (size_t)n, size)) return tps_torch_open(path, out, err); /* refused, with advice */
    return tps_safetensors_open(path, out, err);
}

tps_status tps_checkpoint_open(const char *path, tps_index **out, tps_error *err)
{
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        int e = errno;
        return tps_fail(err, e == ENOENT ? TPS_EINVALID : TPS_EIO, "%s: %s", path, strerror(e));
    }
    if (!S_ISDIR(sb.st_mode)) return open_file(path, out, err);
    static const char *const candidates[] = {"model.safetensors.index.json", "model.safetensors",
                                             "pytorch_model.bin.index.json", "pytorch_model.bin"};
    char p[4096];
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
        if (snprintf(p, sizeof p, "%s/%s", path, candidates[i]) >= (int)sizeof p)
            return tps_fail(err, TPS_EINVALID, "%s: path too long", path);
        if (is_file(p)) return open_file(p, out, err);
    }
    return tps_fail(err, TPS_EINVALID,
                    "%s: a directory without model.safetensors(.index.json) or pytorch_model.bin(.index.json)", path);
}
