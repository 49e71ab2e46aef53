/* gen_llama DIR [LAYERS] [VOCAB]: a Llama-3-8B-shaped BF16 checkpoint for make gpu-check,
 * written without tpshard (so it is an independent input): DIR/model.safetensors and
 * DIR/config.json.  Hidden 4096, 32 heads of 128, 8 KV heads, intermediate 14336; a small
 * vocabulary by default.  Weights are uniform with standard deviation 1/sqrt(fan_in) (so
 * activations stay O(1) through the layer), norms 1 +- 0.1, from a fixed xorshift stream:
 * the same files on every run. */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { H = 4096, HEADS = 32, KV = 8, HD = 128, INTER = 14336 };

typedef struct tensor {
    char name[96];
    uint64_t rows, cols; /* cols 0: a vector of rows elements */
    double lo, hi;       /* uniform range */
} tensor;

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static double uniform(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (double)((rng * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
}

static uint16_t bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1); /* round to nearest even; no NaN or overflow here */
    return (uint16_t)(u >> 16);
}

static uint64_t nelem(const tensor *t)
{
    return t->cols ? t->rows * t->cols : t->rows;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: gen_llama DIR [LAYERS] [VOCAB]\n");
        return 2;
    }
    const char *dir = argv[1];
    unsigned layers = argc > 2 ? (unsigned)atoi(argv[2]) : 2, vocab = argc > 3 ? (unsigned)atoi(argv[3]) : 2048;
    if (layers == 0 || layers > 64 || vocab == 0 || vocab > 1u << 20) {
        fprintf(stderr, "gen_llama: LAYERS 1..64, VOCAB 1..%u\n", 1u << 20);
        return 2;
    }
    size_t nt = 3 + 9 * (size_t)layers, k = 0;
    tensor *ts = calloc(nt, sizeof *ts);
    if (!ts) return 4;
    double wh = sqrt(3.0 / H), wi = sqrt(3.0 / INTER);
    ts[k++] = (tensor){"model.embed_tokens.weight", vocab, H, -1, 1};
    for (unsigned l = 0; l < layers; l++) {
        const struct {
            const char *suffix;
            uint64_t rows, cols;
            double a;
        } w[] = {
            {"input_layernorm.weight", H, 0, 0},
            {"self_attn.q_proj.weight", HEADS * HD, H, wh},
            {"self_attn.k_proj.weight", KV * HD, H, wh},
            {"self_attn.v_proj.weight", KV * HD, H, wh},
            {"self_attn.o_proj.weight", H, HEADS * HD, sqrt(3.0 / (HEADS * HD))},
            {"post_attention_layernorm.weight", H, 0, 0},
            {"mlp.gate_proj.weight", INTER, H, wh},
            {"mlp.up_proj.weight", INTER, H, wh},
            {"mlp.down_proj.weight", H, INTER, wi},
        };
        for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
            tensor *t = &ts[k++];
            snprintf(t->name, sizeof t->name, "model.layers.%u.%s", l, w[i].suffix);
            t->rows = w[i].rows;
            t->cols = w[i].cols;
            t->lo = w[i].a ? -w[i].a : 0.9;
            t->hi = w[i].a ? w[i].a : 1.1;
        }
    }
    ts[k++] = (tensor){"model.norm.weight", H, 0, 0.9, 1.1};
    ts[k++] = (tensor){"lm_head.weight", vocab, H, -wh, wh};

    /* safetensors: u64 header length, JSON header padded with spaces to 8 bytes, data. */
    size_t cap = 256 * nt + 64, len = 0;
    char *hdr = malloc(cap);
    if (!hdr) return 4;
    uint64_t off = 0;
    len += (size_t)snprintf(hdr + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (size_t i = 0; i < nt; i++) {
        uint64_t nb = nelem(&ts[i]) * 2;
        if (ts[i].cols)
            len += (size_t)snprintf(hdr + len, cap - len,
                                    ",\"%s\":{\"dtype\":\"BF16\",\"shape\":[%" PRIu64 ",%" PRIu64
                                    "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}",
                                    ts[i].name, ts[i].rows, ts[i].cols, off, off + nb);
        else
            len += (size_t)snprintf(hdr + len, cap - len,
                                    ",\"%s\":{\"dtype\":\"BF16\",\"shape\":[%" PRIu64 "],\"data_offsets\":[%" PRIu64
                                    ",%" PRIu64 "]}",
                                    ts[i].name, ts[i].rows, off, off + nb);
        off += nb;
    }
    len += (size_t)snprintf(hdr + len, cap - len, "}");
    while (len % 8) hdr[len++] = ' ';

    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return 4;
    }
    uint64_t hl = len;
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(hl >> (8 * i));
    int bad = fwrite(le, 1, 8, f) != 8 || fwrite(hdr, 1, len, f) != len;
    enum { CHUNK = 1 << 20 };
    uint16_t *buf = malloc(CHUNK * sizeof *buf);
    if (!buf) return 4;
    for (size_t i = 0; i < nt && !bad; i++) {
        uint64_t n = nelem(&ts[i]);
        for (uint64_t done = 0; done < n && !bad; done += CHUNK) {
            size_t m = n - done < CHUNK ? (size_t)(n - done) : CHUNK;
            for (size_t j = 0; j < m; j++) buf[j] = bf16((float)(ts[i].lo + (ts[i].hi - ts[i].lo) * uniform()));
            bad = fwrite(buf, 2, m, f) != m;
        }
    }
    if (fclose(f) != 0 || bad) {
        perror(path);
        return 4;
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    f = fopen(path, "w");
    if (!f) {
        perror(path);
        return 4;
    }
    fprintf(f,
            "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n  \"hidden_size\": %d,\n"
            "  \"intermediate_size\": %d,\n  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n"
            "  \"head_dim\": %d,\n  \"num_hidden_layers\": %u,\n  \"vocab_size\": %u,\n  \"hidden_act\": \"silu\",\n"
            "  \"rms_norm_eps\": 1e-05,\n  \"rope_theta\": 500000.0,\n  \"max_position_embeddings\": 8192,\n"
            "  \"attention_bias\": false,\n  \"tie_word_embeddings\": false,\n  \"torch_dtype\": \"bfloat16\"\n}\n",
            H, INTER, HEADS, KV, HD, layers, vocab);
    if (fclose(f) != 0) {
        perror(path);
        return 4;
    }
    printf("%s/model.safetensors: %zu tensors, %.2f GB\n", dir, nt, (double)(off + len + 8) / 1e9);
    free(buf);
    free(hdr);
    free(ts);
    return 0;
}
