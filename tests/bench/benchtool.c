/* benchtool: the small native helpers `make bench` needs, none of which use tpshard code.
 *
 *   benchtool gen FILE LAYERS      a Llama-3-8B-shaped bf16 safetensors file with LAYERS layers
 *                                  (real tensor names, deterministic pseudo-random values) and a
 *                                  config.json beside it
 *   benchtool gen-fp8 FILE LAYERS  the same shapes as a block-scaled FP8 checkpoint (issue 17): every
 *                                  linear F8_E4M3 with its F32 weight_scale_inv of [cdiv(out,128),
 *                                  cdiv(in,128)], embedding, norms and lm_head BF16 as the published
 *                                  FP8 checkpoints keep them, quantization_config fp8 [128,128]
 *   benchtool gen-moe FILE LAYERS EXPERTS   a Mixtral-shaped one with tiny tensors
 *                                  (7 + 3*EXPERTS per layer, plus 3): the many-tensor case
 *   benchtool run [-o OUT] -- CMD  runs CMD (stdout to OUT if given), sampling its RssAnon from
 *                                  /proc/PID/status about every millisecond; prints one line:
 *                                  "wall_s peak_rssanon_kib inblock_bytes exit_status"
 *   benchtool cached FILE...       bytes of the files resident in the page cache (mincore)
 *   benchtool evict FILE...        drops the files' clean pages from the page cache
 *                                  (posix_fadvise DONTNEED), the per-file "cold cache"
 *
 * RssAnon, not VmHWM/RSS: a tool that reads through mmap or the page cache would otherwise be
 * charged for file pages the kernel can drop at will. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int die(const char *what, const char *arg)
{
    fprintf(stderr, "benchtool: %s %s: %s\n", what, arg, strerror(errno));
    return 2;
}

/* ---- gen ---- */

enum { HIDDEN = 4096, INTER = 14336, HEADS = 32, KV_HEADS = 8, HEAD_DIM = 128, VOCAB = 128256 };
/* The many-tensor case: a Mixtral with tiny tensors, where the cost is per tensor, not per byte. */
enum { MOE_HIDDEN = 32, MOE_INTER = 16, MOE_HEADS = 4, MOE_KV_HEADS = 2, MOE_HEAD_DIM = 8, MOE_VOCAB = 256 };

typedef struct gtensor {
    char name[96];
    uint64_t rows, cols; /* cols == 0: a vector */
    const char *dtype;   /* NULL: BF16 */
} gtensor;

static unsigned dtype_size(const char *dtype)
{
    if (!dtype) return 2;
    return strcmp(dtype, "F8_E4M3") == 0 ? 1 : 4;
}

static size_t llama_tensors(gtensor *t, int layers)
{
    size_t n = 0;
    t[n++] = (gtensor){"model.embed_tokens.weight", VOCAB, HIDDEN, NULL};
    for (int l = 0; l < layers; l++) {
        const struct { const char *s; uint64_t r, c; } per[] = {
            {"input_layernorm.weight", HIDDEN, 0},
            {"self_attn.q_proj.weight", HEADS * HEAD_DIM, HIDDEN},
            {"self_attn.k_proj.weight", KV_HEADS * HEAD_DIM, HIDDEN},
            {"self_attn.v_proj.weight", KV_HEADS * HEAD_DIM, HIDDEN},
            {"self_attn.o_proj.weight", HIDDEN, HEADS * HEAD_DIM},
            {"post_attention_layernorm.weight", HIDDEN, 0},
            {"mlp.gate_proj.weight", INTER, HIDDEN},
            {"mlp.up_proj.weight", INTER, HIDDEN},
            {"mlp.down_proj.weight", HIDDEN, INTER},
        };
        for (size_t k = 0; k < sizeof per / sizeof per[0]; k++) {
            t[n] = (gtensor){"", per[k].r, per[k].c, NULL};
            snprintf(t[n].name, sizeof t[n].name, "model.layers.%d.%s", l, per[k].s);
            n++;
        }
    }
    t[n++] = (gtensor){"model.norm.weight", HIDDEN, 0, NULL};
    t[n++] = (gtensor){"lm_head.weight", VOCAB, HIDDEN, NULL};
    return n;
}

static size_t moe_tensors(gtensor *t, int layers, int experts)
{
    size_t n = 0;
    t[n++] = (gtensor){"model.embed_tokens.weight", MOE_VOCAB, MOE_HIDDEN, NULL};
    for (int l = 0; l < layers; l++) {
        const struct { const char *s; uint64_t r, c; } per[] = {
            {"input_layernorm.weight", MOE_HIDDEN, 0},
            {"self_attn.q_proj.weight", MOE_HEADS * MOE_HEAD_DIM, MOE_HIDDEN},
            {"self_attn.k_proj.weight", MOE_KV_HEADS * MOE_HEAD_DIM, MOE_HIDDEN},
            {"self_attn.v_proj.weight", MOE_KV_HEADS * MOE_HEAD_DIM, MOE_HIDDEN},
            {"self_attn.o_proj.weight", MOE_HIDDEN, MOE_HEADS * MOE_HEAD_DIM},
            {"post_attention_layernorm.weight", MOE_HIDDEN, 0},
            {"block_sparse_moe.gate.weight", (uint64_t)experts, MOE_HIDDEN},
        };
        for (size_t k = 0; k < sizeof per / sizeof per[0]; k++) {
            t[n] = (gtensor){"", per[k].r, per[k].c, NULL};
            snprintf(t[n].name, sizeof t[n].name, "model.layers.%d.%s", l, per[k].s);
            n++;
        }
        for (int e = 0; e < experts; e++) {
            const struct { const char *s; uint64_t r, c; } ex[] = {
                {"w1", MOE_INTER, MOE_HIDDEN}, {"w2", MOE_HIDDEN, MOE_INTER}, {"w3", MOE_INTER, MOE_HIDDEN}};
            for (size_t k = 0; k < 3; k++) {
                t[n] = (gtensor){"", ex[k].r, ex[k].c, NULL};
                snprintf(t[n].name, sizeof t[n].name, "model.layers.%d.block_sparse_moe.experts.%d.%s.weight", l, e,
                         ex[k].s);
                n++;
            }
        }
    }
    t[n++] = (gtensor){"model.norm.weight", MOE_HIDDEN, 0, NULL};
    t[n++] = (gtensor){"lm_head.weight", MOE_VOCAB, MOE_HIDDEN, NULL};
    return n;
}

/* Writes the safetensors file (tensors in the given order, header sorted or not: readers
 * must not care) and the config text as config.json beside it. */
static int write_checkpoint(const char *path, const gtensor *t, size_t n, const char *config)
{
    size_t hcap = n * 160 + 64, hl = 0;
    char *h = malloc(hcap);
    uint64_t off = 0;
    if (!h) return die("out of memory for", path);
    hl += (size_t)snprintf(h + hl, hcap - hl, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (size_t i = 0; i < n; i++) {
        const char *dt = t[i].dtype ? t[i].dtype : "BF16";
        uint64_t bytes = t[i].rows * (t[i].cols ? t[i].cols : 1) * dtype_size(t[i].dtype);
        if (t[i].cols)
            hl += (size_t)snprintf(h + hl, hcap - hl, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%" PRIu64 ",%" PRIu64
                                   "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}",
                                   t[i].name, dt, t[i].rows, t[i].cols, off, off + bytes);
        else
            hl += (size_t)snprintf(h + hl, hcap - hl, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%" PRIu64
                                   "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}",
                                   t[i].name, dt, t[i].rows, off, off + bytes);
        off += bytes;
    }
    hl += (size_t)snprintf(h + hl, hcap - hl, "}");
    while (hl % 8) h[hl++] = ' ';
    FILE *f = fopen(path, "wb");
    if (!f) return die("cannot create", path);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(h, 1, hl, f);
    /* bf16 values of magnitude 2^-7..2^-3 with random sign and mantissa: plausible weights,
     * no NaN or Inf, different in every tensor and position (xorshift64*). */
    enum { BUF = 4 << 20 };
    uint16_t *buf = malloc(BUF);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (uint64_t left = off; left > 0;) {
        size_t k = left < BUF ? (size_t)left : BUF;
        for (size_t i = 0; i < k / 2; i += 4) {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            uint64_t r = x * 0x2545F4914F6CDD1Dull;
            for (int j = 0; j < 4; j++, r >>= 16) buf[i + j] = (uint16_t)(0x3c00 | (r & 0x81ff));
        }
        if (fwrite(buf, 1, k, f) != k) return die("writing", path);
        left -= k;
    }
    if (fclose(f) != 0) return die("closing", path);
    char cfg[4096];
    const char *slash = strrchr(path, '/');
    snprintf(cfg, sizeof cfg, "%.*sconfig.json", slash ? (int)(slash - path + 1) : 0, path);
    f = fopen(cfg, "w");
    if (!f) return die("cannot create", cfg);
    fputs(config, f);
    fclose(f);
    printf("%s: %zu tensors, %" PRIu64 " data bytes\n", path, n, off);
    free(buf);
    free(h);
    return 0;
}

/* config.json of the Llama-3-8B-shaped checkpoint with `layers` layers; extra (text after
 * the last key, starting with ",") adds keys. */
static void llama_config(char *cfg, size_t size, int layers, const char *extra)
{
    snprintf(cfg, size,
             "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
             "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_attention_heads\": %d,\n"
             "  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n  \"num_hidden_layers\": %d,\n"
             "  \"vocab_size\": %d,\n  \"rms_norm_eps\": 1e-05,\n  \"rope_theta\": 500000.0,\n"
             "  \"hidden_act\": \"silu\",\n  \"tie_word_embeddings\": false,\n  \"torch_dtype\": \"bfloat16\"%s\n}\n",
             HIDDEN, INTER, HEADS, KV_HEADS, HEAD_DIM, layers, VOCAB, extra);
}

static int gen(const char *path, int layers)
{
    if (layers < 1 || layers > 512) {
        fprintf(stderr, "benchtool gen: LAYERS must be 1..512\n");
        return 2;
    }
    gtensor *t = calloc((size_t)layers * 9 + 3, sizeof *t);
    if (!t) return die("out of memory for", path);
    size_t n = llama_tensors(t, layers);
    char cfg[1024];
    llama_config(cfg, sizeof cfg, layers, "");
    int rc = write_checkpoint(path, t, n, cfg);
    free(t);
    return rc;
}

/* The FP8 twin of gen: llama_tensors' list with each 2-D layer weight turned F8_E4M3 and its
 * weight_scale_inv inserted after it.  Split is value-blind, so the fill's bytes stand as they
 * are (some are E4M3 NaN codes); only the dtypes, shapes and scale grid matter to its cost. */
static int gen_fp8(const char *path, int layers)
{
    if (layers < 1 || layers > 512) {
        fprintf(stderr, "benchtool gen-fp8: LAYERS must be 1..512\n");
        return 2;
    }
    gtensor *b = calloc((size_t)layers * 9 + 3, sizeof *b), *t = calloc((size_t)layers * 16 + 3, sizeof *t);
    if (!b || !t) {
        free(b);
        free(t);
        return die("out of memory for", path);
    }
    size_t nb = llama_tensors(b, layers), n = 0;
    for (size_t i = 0; i < nb; i++) {
        t[n++] = b[i];
        if (!b[i].cols || strncmp(b[i].name, "model.layers.", 13) != 0) continue;
        t[n - 1].dtype = "F8_E4M3";
        t[n] = (gtensor){"", (b[i].rows + 127) / 128, (b[i].cols + 127) / 128, "F32"};
        snprintf(t[n].name, sizeof t[n].name, "%.*s_scale_inv", (int)sizeof t[n].name - 12, b[i].name);
        n++;
    }
    char cfg[1024];
    llama_config(cfg, sizeof cfg, layers,
                 ",\n  \"quantization_config\": {\"quant_method\": \"fp8\", \"activation_scheme\": \"dynamic\",\n"
                 "    \"fmt\": \"e4m3\", \"weight_block_size\": [128, 128]}");
    int rc = write_checkpoint(path, t, n, cfg);
    free(b);
    free(t);
    return rc;
}

static int gen_moe(const char *path, int layers, int experts)
{
    if (layers < 1 || layers > 4096 || experts < 1 || experts > 4096) {
        fprintf(stderr, "benchtool gen-moe: LAYERS and EXPERTS must be 1..4096\n");
        return 2;
    }
    gtensor *t = calloc((size_t)layers * (7 + 3 * (size_t)experts) + 3, sizeof *t);
    if (!t) return die("out of memory for", path);
    size_t n = moe_tensors(t, layers, experts);
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\n  \"architectures\": [\"MixtralForCausalLM\"],\n  \"model_type\": \"mixtral\",\n"
             "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_attention_heads\": %d,\n"
             "  \"num_key_value_heads\": %d,\n  \"num_hidden_layers\": %d,\n  \"num_local_experts\": %d,\n"
             "  \"num_experts_per_tok\": 2,\n  \"vocab_size\": %d,\n  \"rms_norm_eps\": 1e-05,\n"
             "  \"rope_theta\": 1000000.0,\n  \"hidden_act\": \"silu\",\n  \"tie_word_embeddings\": false,\n"
             "  \"torch_dtype\": \"bfloat16\"\n}\n",
             MOE_HIDDEN, MOE_INTER, MOE_HEADS, MOE_KV_HEADS, layers, experts, MOE_VOCAB);
    int rc = write_checkpoint(path, t, n, cfg);
    free(t);
    return rc;
}

/* ---- run ---- */

static long rss_anon_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long v = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "RssAnon:", 8) == 0) {
            v = strtol(line + 8, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int run(int argc, char **argv)
{
    const char *out = NULL;
    int i = 0;
    if (i + 1 < argc && strcmp(argv[i], "-o") == 0) {
        out = argv[i + 1];
        i += 2;
    }
    if (i < argc && strcmp(argv[i], "--") == 0) i++;
    if (i >= argc) {
        fprintf(stderr, "usage: benchtool run [-o OUT] -- CMD ARGS...\n");
        return 2;
    }
    double t0 = now();
    pid_t pid = fork();
    if (pid < 0) return die("", "fork");
    if (pid == 0) {
        if (out) {
            int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd < 0 || dup2(fd, 1) < 0) _exit(127);
            close(fd);
        }
        execvp(argv[i], argv + i);
        _exit(127);
    }
    long peak = 0;
    int status = 0;
    struct rusage ru;
    const struct timespec ms = {0, 1000000};
    for (;;) {
        pid_t w = wait4(pid, &status, WNOHANG, &ru);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) return die("", "wait4");
        long v = rss_anon_kib(pid);
        if (v > peak) peak = v;
        nanosleep(&ms, NULL);
    }
    double wall = now() - t0;
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    /* Voluntary context switches of all its threads: each is a wait (a futex between the
     * copy engine's threads, mostly), the cost of handing work between them. */
    printf("%.4f %ld %lld %d %ld\n", wall, peak, (long long)ru.ru_inblock * 512, rc, ru.ru_nvcsw);
    return 0;
}

/* ---- cached / evict ---- */

static int cached(int argc, char **argv)
{
    unsigned long long total = 0;
    long page = sysconf(_SC_PAGESIZE);
    for (int i = 0; i < argc; i++) {
        int fd = open(argv[i], O_RDONLY | O_CLOEXEC);
        struct stat sb;
        if (fd < 0 || fstat(fd, &sb) != 0) return die("cannot open", argv[i]);
        if (sb.st_size == 0) {
            close(fd);
            continue;
        }
        void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (p == MAP_FAILED) return die("cannot map", argv[i]);
        size_t pages = ((size_t)sb.st_size + (size_t)page - 1) / (size_t)page;
        unsigned char *vec = malloc(pages);
        if (!vec || mincore(p, (size_t)sb.st_size, vec) != 0) return die("mincore", argv[i]);
        for (size_t k = 0; k < pages; k++)
            if (vec[k] & 1) total += (unsigned long long)page;
        free(vec);
        munmap(p, (size_t)sb.st_size);
    }
    printf("%llu\n", total);
    return 0;
}

static int evict(int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        int fd = open(argv[i], O_RDONLY | O_CLOEXEC);
        if (fd < 0) return die("cannot open", argv[i]);
        fdatasync(fd); /* dirty pages cannot be dropped */
        int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
        if (rc != 0) {
            errno = rc;
            return die("posix_fadvise", argv[i]);
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && strcmp(argv[1], "gen") == 0) return gen(argv[2], atoi(argv[3]));
    if (argc >= 4 && strcmp(argv[1], "gen-fp8") == 0) return gen_fp8(argv[2], atoi(argv[3]));
    if (argc >= 5 && strcmp(argv[1], "gen-moe") == 0) return gen_moe(argv[2], atoi(argv[3]), atoi(argv[4]));
    if (argc >= 3 && strcmp(argv[1], "run") == 0) return run(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "cached") == 0) return cached(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "evict") == 0) return evict(argc - 2, argv + 2);
    fprintf(stderr, "usage: benchtool gen FILE LAYERS | gen-fp8 FILE LAYERS | gen-moe FILE LAYERS EXPERTS | run [-o OUT] -- CMD... | cached FILE... | evict FILE...\n");
    return 2;
}
