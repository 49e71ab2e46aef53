#include "side_files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../set/manifest.h"

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static bool side_file(const char *name)
{
    static const char *const weights[] = {".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt", ".npz", ".npy",
                                          ".h5", ".msgpack", ".index.json", NULL};
    if (name[0] == '.' || strcmp(name, TPS_MANIFEST_NAME) == 0) return false;
    for (size_t i = 0; weights[i]; i++)
        if (ends_with(name, weights[i])) return false;
    return true;
}

static tps_status copy_file(const char *from, const char *to, tps_error *err)
{
    int in = open(from, O_RDONLY | O_CLOEXEC), out = -1;
    if (in < 0) return tps_fail_errno(err, errno, "%s: cannot open", from);
    tps_status st = TPS_OK;
    char buf[1 << 16];
    if ((out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) < 0) {
        st = tps_fail_errno(err, errno, "%s: cannot create", to);
        goto cleanup;
    }
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            st = tps_fail_errno(err, errno, "%s: read failed", from);
            goto cleanup;
        }
        if (n == 0) break;
        for (ssize_t w = 0; w < n;) {
            ssize_t k = write(out, buf + w, (size_t)(n - w));
            if (k < 0 && errno == EINTR) continue;
            if (k < 0) {
                st = tps_fail_errno(err, errno, "%s: write failed", to);
                goto cleanup;
            }
            w += k;
        }
    }
    if (fsync(out) != 0) st = tps_fail_errno(err, errno, "%s: fsync failed", to);
cleanup:
    if (out >= 0 && close(out) != 0 && st == TPS_OK) st = tps_fail_errno(err, errno, "%s: close failed", to);
    close(in);
    return st;
}

tps_status tps_copy_side_files(const char *src_dir, const tps_outdir *od, tps_error *err)
{
    DIR *d = opendir(src_dir);
    if (!d) return tps_fail_errno(err, errno, "%s: cannot list the model's other files", src_dir);
    tps_status st = TPS_OK;
    struct dirent *e;
    while (st == TPS_OK && (e = readdir(d))) {
        if (!side_file(e->d_name)) continue;
        char from[4096];
        struct stat sb;
        if (snprintf(from, sizeof from, "%s/%s", src_dir, e->d_name) >= (int)sizeof from || stat(from, &sb) != 0 ||
            !S_ISREG(sb.st_mode))
            continue;
        char *to = tps_outdir_path(od, e->d_name);
        st = to ? copy_file(from, to, err) : tps_fail_oom(err, "copying the model's files");
        free(to);
    }
    closedir(d);
    return st;
}
