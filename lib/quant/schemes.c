/* The table of quantization schemes: one line per quant_method a config.json's
 * quantization_config may name, in the order the refusal of an unknown one lists them.  A
 * line says what it matches (the quant_method), how a checkpoint of it is read (its family's
 * reader, which builds the schemes of its quantized linears: their companions say how their
 * tensors partition, lib/quant/scheme.h) and, for a method whose tensors are not companions
 * of a linear, how it cuts them.  A method the engines refuse under tensor parallelism is a
 * line with the reason instead of a reader.  Adding a scheme: lib/quant/quant.h. */
#include <stddef.h>

#include "quant_int.h"

const tps_quant_method tps_quant_methods[] = {
    /* quant_method         reader               cuts its tensors itself */
    {"fp8",                 tps_quant_read_fp8,   NULL,                NULL},
    {"compressed-tensors",  tps_quant_read_ct,    NULL,                NULL},
    {"gptq",                tps_quant_read_gptq,  NULL,                NULL},
    {"awq",                 tps_quant_read_awq,   NULL,                NULL},
    {"mxfp4",               tps_quant_read_mxfp4, tps_quant_cut_mxfp4, NULL},
    /* Refused: what the engines themselves refuse under tensor parallelism. */
    {"bitsandbytes", NULL, NULL,
     "a pre-quantized bitsandbytes checkpoint cannot be split for tensor parallelism (its quant_state describes "
     "the whole flattened weight; vLLM: \"Prequant BitsAndBytes models with tensor parallelism is not "
     "supported\"); split the BF16 checkpoint and let the engine quantize it on load"},
    {"gguf", NULL, NULL,
     "GGUF is one file the engine reads whole and cuts itself; no engine loads per-rank GGUF files, so there is "
     "nothing to pre-shard"},
    {NULL, NULL, NULL, NULL},
};
