/* File names from templates (lib/engine/file_names.h). */
#include "file_names.h"

#include <stdio.h>
#include <string.h>

tps_status tps_format_name(const char *tmpl, uint64_t r, uint64_t T, uint64_t part, char *out, size_t size,
                           tps_error *err)
{
    size_t n = 0;
    for (const char *p = tmpl; *p;) {
        char num[32];
        const char *piece = NULL;
        size_t plen = 0;
        if (strncmp(p, "{rank}", 6) == 0) {
            snprintf(num, sizeof num, "%llu", (unsigned long long)r);
            piece = num;
            p += 6;
        } else if (strncmp(p, "{tp}", 4) == 0) {
            snprintf(num, sizeof num, "%llu", (unsigned long long)T);
            piece = num;
            p += 4;
        } else if (strncmp(p, "{part}", 6) == 0) {
            snprintf(num, sizeof num, "%llu", (unsigned long long)part);
            piece = num;
            p += 6;
        } else {
            piece = p;
            plen = 1;
            p++;
        }
        if (!plen) plen = strlen(piece);
        if (n + plen + 1 > size) return tps_fail(err, TPS_EARG, "file name template '%s' gives too long a name", tmpl);
        memcpy(out + n, piece, plen);
        n += plen;
    }
    out[n] = '\0';
    if (!n || strchr(out, '/') || strcmp(out, ".") == 0 || strcmp(out, "..") == 0 || out[0] == '.')
        return tps_fail(err, TPS_EARG, "file name template '%s' gives '%s', not a plain file name", tmpl, out);
    if (!strstr(tmpl, "{rank}") && T > 1)
        return tps_fail(err, TPS_EARG, "file name template '%s' lacks {rank}", tmpl);
    return TPS_OK;
}
