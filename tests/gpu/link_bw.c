/* make gpu-check's link measurement: the host-to-device rate of a device plugin's own uploads,
 * from page-locked memory (host_alloc + upload_async/upload_wait, what the reference's weights
 * take) and from pageable memory (upload, what the ranks' slices take), best of REPS copies of
 * MIB MiB each.  Usage: link_bw PLUGIN.so [MIB [REPS]]; prints
 *   link: pinned P GB/s, pageable Q GB/s (MIB MiB, best of REPS; DEVICE)
 * Exit 0, or 1 with the plugin's error.  Runs on the devsim plugin too (a memcpy), which is how
 * make test keeps it working without a GPU. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "verify/ranks/plugin.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int die(const char *what, const tps_error *err)
{
    fprintf(stderr, "link_bw: %s: %s\n", what, err ? err->msg : dlerror());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: link_bw PLUGIN.so [MIB [REPS]]\n");
        return 2;
    }
    size_t mib = argc > 2 ? (size_t)strtoul(argv[2], NULL, 10) : 256;
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    if (!mib || reps < 1) return 2;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) return die(argv[1], NULL);
    tps_dev_plugin_fn get = (tps_dev_plugin_fn)(uintptr_t)dlsym(h, TPS_DEV_PLUGIN_SYMBOL);
    const size_t sizes[] = TPS_DEV_ABI_SIZES;
    const tps_dev_api *api = get ? get(TPS_PLUGIN_ABI, sizes, sizeof sizes / sizeof sizes[0]) : NULL;
    if (!api) {
        fprintf(stderr, "link_bw: %s is not a device plugin of ABI %d\n", argv[1], TPS_PLUGIN_ABI);
        return 1;
    }
    tps_error err;
    memset(&err, 0, sizeof err);
    int count = 0;
    char desc[200] = "";
    if (api->devices(&count, desc, sizeof desc, &err) != TPS_OK) return die("devices", &err);
    /* One rank, no communicator: emulate skips NCCL, which a link measurement does not need. */
    tps_dev_setup s = {.T = 1, .first = 0, .count = 1, .local_rank = -1, .emulate = true};
    void *ctx = NULL;
    if (api->open(&s, &ctx, &err) != TPS_OK) return die("open", &err);
    size_t bytes = mib << 20;
    void *pinned = NULL, *pageable = malloc(bytes);
    if (api->host_alloc(ctx, bytes, &pinned, &err) != TPS_OK || !pageable) return die("host memory", &err);
    memset(pinned, 0x3c, bytes); /* touched: no first-use page faults in the timing */
    memset(pageable, 0x3c, bytes);
    tps_dev_weight w = {.name = "link_bw", .dtype = TPS_DT_F32, .rows = bytes / 4 / 1024, .cols = 1024};
    double best_pin = 0, best_page = 0;
    for (int r = 0; r < reps; r++) {
        void *buf = NULL;
        w.data = pinned;
        double t0 = now();
        if (api->upload_async(ctx, 0, &w, &buf, &err) != TPS_OK || api->upload_wait(ctx, 0, buf, &err) != TPS_OK)
            return die("pinned upload", &err);
        double t = now() - t0;
        api->release(ctx, 0, buf);
        if (t > 0 && bytes / t > best_pin) best_pin = (double)bytes / t;
        w.data = pageable;
        t0 = now();
        if (api->upload(ctx, 0, &w, &buf, &err) != TPS_OK) return die("pageable upload", &err);
        t = now() - t0;
        api->release(ctx, 0, buf);
        if (t > 0 && bytes / t > best_page) best_page = (double)bytes / t;
    }
    printf("link: pinned %.2f GB/s, pageable %.2f GB/s (%zu MiB, best of %d; %s)\n", best_pin / 1e9, best_page / 1e9,
           mib, reps, desc);
    api->host_free(ctx, pinned);
    free(pageable);
    api->close(ctx);
    return 0;
}
