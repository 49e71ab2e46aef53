/* Printing a Megatron checkpoint's account (cmd/inspect_megatron.h). */
#include "inspect_megatron.h"

#include <stdio.h>

#include "cli.h"
#include "formats/megatron.h"

int tps_inspect_megatron(const char *path, bool json)
{
    tps_error err;
    tps_error_clear(&err);
    tps_buf out = TPS_BUF_INIT;
    tps_status st = tps_megatron_inspect(path, json, &out, &err);
    const char *text = tps_buf_cstr(&out);
    if (!st && text) fputs(text, stdout);
    tps_buf_release(&out);
    return st ? tps_cli_report("inspect", &err) : 0;
}
