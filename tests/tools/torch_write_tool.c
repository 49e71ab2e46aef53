/* Drives the torch archive writer (formats/torch/torch_write.h) and the pickle writer
 * (formats/torch/pickle_write.h) from the interop tests, before any command writes torch files.
 *
 *   torch_write_tool pickle JSON
 *       prints the protocol-2 pickle of the JSON-encoded value, in hex
 *   torch_write_tool write IN.safetensors OUT.pt|- [--meta KEY=VALUE]... [--chunk N]
 *       writes the tensors of IN (in its order) through tps_torch_sink with the given
 *       metadata (torch.top, torch.model_key, torch.model_entries); "-" opens a counting
 *       file.  The bytes go in pieces of N (default 1000) bytes that straddle tensors,
 *       alternately through write and write_crc.  Prints "crc size" (hex, decimal).
 * Exit status 0, or 1 with the error on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/torch/pickle_write.h"
#include "formats/safetensors/safetensors.h"
#include "formats/torch/torch_write.h"
#include "lib/base/crc.h"

static int fail(const tps_error *err)
{
    fprintf(stderr, "torch_write_tool: %s (%s)\n", err->msg, tps_status_name(err->code));
    return 1;
}

static int cmd_pickle(const char *text)
{
    tps_error err;
    tps_error_clear(&err);
    tps_json_doc *doc = NULL;
    tps_buf out = TPS_BUF_INIT;
    if (tps_json_parse(text, strlen(text), "argument", &doc, &err) ||
        tps_pickle_write_json(tps_json_root(doc), "argument", &out, &err)) {
        tps_json_doc_free(doc);
        tps_buf_release(&out);
        return fail(&err);
    }
    for (size_t i = 0; i < out.len; i++) printf("%02x", (unsigned char)out.data[i]);
    printf("\n");
    tps_json_doc_free(doc);
    tps_buf_release(&out);
    return 0;
}

static int cmd_write(int argc, char **argv)
{
    tps_error err;
    tps_error_clear(&err);
    const char *in = argv[0], *outp = argv[1];
    size_t chunk = 1000;
    tps_kv meta[16];
    size_t nmeta = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--chunk") == 0 && i + 1 < argc) chunk = (size_t)strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--meta") == 0 && i + 1 < argc && nmeta < 16) {
            char *eq = strchr(argv[++i], '=');
            if (!eq) return fprintf(stderr, "torch_write_tool: --meta takes KEY=VALUE\n"), 2;
            *eq = 0;
            meta[nmeta++] = (tps_kv){argv[i], eq + 1};
        } else return fprintf(stderr, "torch_write_tool: unknown argument %s\n", argv[i]), 2;
    }
    if (chunk == 0) chunk = 1;
    tps_index *ix = NULL;
    if (tps_safetensors_open(in, &ix, &err)) return fail(&err);
    size_t n = ix->ntensors;
    tps_sink_tensor *t = calloc(n ? n : 1, sizeof *t);
    unsigned char *buf = malloc(chunk);
    int rc = 1;
    tps_sink_file *f = NULL;
    if (!t || !buf) {
        fprintf(stderr, "torch_write_tool: out of memory\n");
        goto done;
    }
    for (size_t i = 0; i < n; i++) t[i] = (tps_sink_tensor){ix->tensors[i].name, ix->tensors[i].dtype, ix->tensors[i].ndim, ix->tensors[i].shape};
    if (tps_torch_sink.open(strcmp(outp, "-") ? outp : NULL, t, n, meta, nmeta, &f, &err)) {
        rc = fail(&err);
        goto done;
    }
    size_t ti = 0, fill = 0, pieces = 0;
    uint64_t off = 0;
    for (;;) {
        while (fill < chunk && ti < n) {
            const tps_tensor *tt = &ix->tensors[ti];
            uint64_t left = tt->nbytes - off;
            size_t take = left < chunk - fill ? (size_t)left : chunk - fill;
            if (take && tps_tensor_read(ix, tt, off, buf + fill, take, &err)) {
                rc = fail(&err);
                goto done;
            }
            fill += take;
            off += take;
            if (off == tt->nbytes) {
                ti++;
                off = 0;
            }
        }
        if (fill == 0) break;
        tps_status st = pieces++ % 2 ? tps_torch_sink.write_crc(f, buf, fill, tps_crc32(0, buf, fill), &err)
                                     : tps_torch_sink.write(f, buf, fill, &err);
        if (st) {
            rc = fail(&err);
            goto done;
        }
        fill = 0;
    }
    uint32_t crc = 0;
    uint64_t size = 0;
    tps_sink_file *g = f;
    f = NULL;
    if (tps_torch_sink.commit(g, &crc, &size, &err)) {
        rc = fail(&err);
        goto done;
    }
    printf("%08x %llu\n", crc, (unsigned long long)size);
    rc = 0;
done:
    tps_torch_sink.abort(f);
    free(t);
    free(buf);
    tps_index_free(ix);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "pickle") == 0) return cmd_pickle(argv[2]);
    if (argc >= 4 && strcmp(argv[1], "write") == 0) return cmd_write(argc - 2, argv + 2);
    fprintf(stderr, "usage: torch_write_tool pickle JSON | write IN.safetensors OUT.pt|- [--meta K=V]... [--chunk N]\n");
    return 2;
}
