/* Finding a CBLAS at run time: see verify/math/blas.h for where and why. */
#include <dlfcn.h>
#include <glob.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blas.h"

static tps_blas found;
static char found_name[256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* dlsym returns void *; the standard way to a function pointer is through memcpy. */
static void *sym(void *h, const char *prefix, const char *name)
{
    char full[96];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    return dlsym(h, full);
}

/* Opens path and takes its GEMMs under either prefix; true when both are there. */
static bool try_library(const char *path)
{
    static const char *const prefixes[] = {"", "scipy_"};
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return false;
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
        void *s = sym(h, prefixes[i], "cblas_sgemm"), *d = sym(h, prefixes[i], "cblas_dgemm");
        if (!s || !d) continue;
        memcpy(&found.sgemm, &s, sizeof s);
        memcpy(&found.dgemm, &d, sizeof d);
        /* One thread a call: verify's ranks are threads already, and OpenBLAS's own pool,
         * shared by eight callers, spins in sched_yield waiting for itself. */
        void *nt = sym(h, prefixes[i], "openblas_set_num_threads");
        if (nt) {
            void (*set_threads)(int);
            memcpy(&set_threads, &nt, sizeof nt);
            set_threads(1);
        }
        void *cf = sym(h, prefixes[i], "openblas_get_config"), *cn = sym(h, prefixes[i], "openblas_get_corename");
        char *(*config)(void) = NULL, *(*core)(void) = NULL;
        if (cf) memcpy(&config, &cf, sizeof cf);
        if (cn) memcpy(&core, &cn, sizeof cn);
        char version[64] = "a CBLAS";
        if (config) { /* "OpenBLAS 0.3.21 DYNAMIC_ARCH ...": its first two words */
            const char *c = config();
            int words = 0, n = 0;
            while (c[n] && n < (int)sizeof version - 1 && !(c[n] == ' ' && ++words == 2)) n++;
            snprintf(version, sizeof version, "%.*s", n, c);
        }
        const char *base = strrchr(path, '/');
        snprintf(found_name, sizeof found_name, "%s%s%s (%s)", version, core ? " " : "", core ? core() : "",
                 base ? base + 1 : path);
        found.name = found_name;
        return true; /* kept open for the process's life */
    }
    dlclose(h);
    return false;
}

/* scipy-openblas32 in the Python environment the executable was installed into. */
static bool try_beside_executable(void)
{
    char exe[PATH_MAX], pattern[PATH_MAX + 96];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return false;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return false;
    *slash = '\0'; /* PREFIX/bin */
    static const char *const sites[] = {"site-packages", "dist-packages"};
    bool ok = false;
    for (size_t i = 0; i < 2 && !ok; i++) {
        snprintf(pattern, sizeof pattern, "%s/../lib/python3*/%s/scipy_openblas32/lib/libscipy_openblas*.so",
                 exe, sites[i]);
        glob_t g;
        if (glob(pattern, 0, NULL, &g) == 0)
            for (size_t j = 0; j < g.gl_pathc && !ok; j++) ok = try_library(g.gl_pathv[j]);
        globfree(&g);
    }
    return ok;
}

static void search(void)
{
    static const char *const system_names[] = {"libopenblas.so.0", "libopenblas.so", "libcblas.so.3"};
    const char *env = getenv("TPSHARD_BLAS");
    if (env && *env && try_library(env)) return;
    for (size_t i = 0; i < sizeof system_names / sizeof *system_names; i++)
        if (try_library(system_names[i])) return;
    try_beside_executable();
}

const tps_blas *tps_blas_get(void)
{
    pthread_once(&once, search);
    return found.sgemm ? &found : NULL;
}

const char *tps_blas_searched(void)
{
    return "$TPSHARD_BLAS, libopenblas.so.0, libopenblas.so, libcblas.so.3, and scipy-openblas32 beside the "
           "executable";
}
