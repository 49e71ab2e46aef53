/* Size expressions of layouts ("kv_heads*head_dim", "3*hidden", "hidden/heads"):
 * compiled once at parse time, so a typo is reported with its line and column even when
 * no tensor ever needs it, and evaluated per tensor with exact unsigned arithmetic, so a
 * shape that does not fit the model's sizes is reported rather than rounded. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/checked.h"
#include "layout_int.h"

const char *const tps_size_names[TPS_NSIZES] = {"hidden", "heads", "kv_heads", "head_dim",
                                                "intermediate", "vocab", "layers", "experts",
                                                "moe_intermediate", "shared_intermediate",
                                                "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"};

static const size_t size_offsets[TPS_NSIZES] = {
    offsetof(tps_model_sizes, hidden),       offsetof(tps_model_sizes, heads),
    offsetof(tps_model_sizes, kv_heads),     offsetof(tps_model_sizes, head_dim),
    offsetof(tps_model_sizes, intermediate), offsetof(tps_model_sizes, vocab),
    offsetof(tps_model_sizes, layers),       offsetof(tps_model_sizes, experts),
    offsetof(tps_model_sizes, moe_intermediate), offsetof(tps_model_sizes, shared_intermediate),
    offsetof(tps_model_sizes, qk_nope_head_dim), offsetof(tps_model_sizes, qk_rope_head_dim),
    offsetof(tps_model_sizes, v_head_dim),
};

uint64_t *tps_size_slot(tps_model_sizes *s, int i) { return (uint64_t *)((char *)s + size_offsets[i]); }

uint64_t tps_size_get(const tps_model_sizes *s, int i)
{
    return *(const uint64_t *)((const char *)s + size_offsets[i]);
}

int tps_size_lookup(const char *name, size_t len)
{
    for (int i = 0; i < TPS_NSIZES; i++)
        if (strlen(tps_size_names[i]) == len && memcmp(tps_size_names[i], name, len) == 0) return i;
    return -1;
}

/* Recursive descent straight to postfix: expr := term (('+'|'-') term)*,
 * term := atom (('*'|'/') atom)*, atom := number | size | '(' expr ')'. */
typedef struct ecomp {
    const char *s;
    size_t pos;
    tps_expr_op *code;
    int n, cap;
    const char *msg;
    int depth;
} ecomp;

static void skip_ws(ecomp *c)
{
    while (c->s[c->pos] == ' ' || c->s[c->pos] == '\t') c->pos++;
}

static bool emit(ecomp *c, char op, uint64_t v)
{
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 8;
        tps_expr_op *p = realloc(c->code, (size_t)cap * sizeof *p);
        if (!p) {
            c->msg = "out of memory";
            return false;
        }
        c->code = p;
        c->cap = cap;
    }
    c->code[c->n].op = op;
    c->code[c->n].v = v;
    c->n++;
    return true;
}

static bool parse_sum(ecomp *c);

static bool parse_atom(ecomp *c)
{
    skip_ws(c);
    char ch = c->s[c->pos];
    if (ch == '(') {
        if (++c->depth > 32) {
            c->msg = "parentheses nested too deeply";
            return false;
        }
        c->pos++;
        if (!parse_sum(c)) return false;
        skip_ws(c);
        if (c->s[c->pos] != ')') {
            c->msg = "expected ')'";
            return false;
        }
        c->pos++;
        c->depth--;
        return true;
    }
    if (ch >= '0' && ch <= '9') {
        uint64_t v = 0;
        while (c->s[c->pos] >= '0' && c->s[c->pos] <= '9') {
            if (!tps_mul_u64(v, 10, &v) || !tps_add_u64(v, (uint64_t)(c->s[c->pos] - '0'), &v)) {
                c->msg = "number too large";
                return false;
            }
            c->pos++;
        }
        return emit(c, 'n', v);
    }
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_') {
        size_t start = c->pos;
        while ((c->s[c->pos] >= 'a' && c->s[c->pos] <= 'z') || (c->s[c->pos] >= 'A' && c->s[c->pos] <= 'Z') ||
               (c->s[c->pos] >= '0' && c->s[c->pos] <= '9') || c->s[c->pos] == '_')
            c->pos++;
        int i = tps_size_lookup(c->s + start, c->pos - start);
        if (i < 0) {
            c->pos = start;
            c->msg = "unknown size (known: hidden, heads, kv_heads, head_dim, intermediate, vocab, layers, experts, "
                     "moe_intermediate, shared_intermediate, qk_nope_head_dim, qk_rope_head_dim, v_head_dim)";
            return false;
        }
        return emit(c, 's', (uint64_t)i);
    }
    c->msg = ch ? "expected a number, a size name or '('" : "expression ends early";
    return false;
}

static bool parse_product(ecomp *c)
{
    if (!parse_atom(c)) return false;
    for (;;) {
        skip_ws(c);
        char op = c->s[c->pos];
        if (op != '*' && op != '/') return true;
        c->pos++;
        if (!parse_atom(c) || !emit(c, op, 0)) return false;
    }
}

static bool parse_sum(ecomp *c)
{
    if (!parse_product(c)) return false;
    for (;;) {
        skip_ws(c);
        char op = c->s[c->pos];
        if (op != '+' && op != '-') return true;
        c->pos++;
        if (!parse_product(c) || !emit(c, op, 0)) return false;
    }
}

bool tps_expr_compile(const char *text, tps_expr *out, size_t *errpos, const char **errmsg)
{
    ecomp c = {.s = text};
    bool ok = parse_sum(&c);
    if (ok) {
        skip_ws(&c);
        if (text[c.pos] != '\0') {
            c.msg = "unexpected character";
            ok = false;
        }
    }
    char *copy = ok ? strdup(text) : NULL;
    if (ok && !copy) {
        c.msg = "out of memory";
        ok = false;
    }
    if (!ok) {
        free(c.code);
        *errpos = c.pos;
        *errmsg = c.msg;
        return false;
    }
    out->code = c.code;
    out->n = c.n;
    out->text = copy;
    return true;
}

bool tps_expr_ready(const tps_expr *e, const tps_model_sizes *s)
{
    for (int i = 0; i < e->n; i++)
        if (e->code[i].op == 's' && tps_size_get(s, (int)e->code[i].v) == 0) return false;
    return true;
}

tps_status tps_expr_eval(const tps_expr *e, const tps_model_sizes *s, const char *file, const char *ctx,
                         uint64_t *out, tps_error *err)
{
    /* Postfix of n ops never holds more than n values. */
    uint64_t stack[64];
    int sp = 0;
    if (e->n > (int)(sizeof stack / sizeof stack[0]))
        return tps_fail(err, TPS_EINVALID, "%s: expression '%s' (%s:%zu:%zu) is too long", ctx, e->text, file,
                        e->at.line, e->at.col);
    for (int i = 0; i < e->n; i++) {
        const tps_expr_op *o = &e->code[i];
        if (o->op == 'n') {
            stack[sp++] = o->v;
            continue;
        }
        if (o->op == 's') {
            uint64_t v = tps_size_get(s, (int)o->v);
            if (v == 0)
                return tps_fail(err, TPS_EINVALID,
                                "%s: expression '%s' (%s:%zu:%zu) needs size '%s', which is unknown "
                                "(give it under sizes:, in config.json, or an infer: hint)",
                                ctx, e->text, file, e->at.line, e->at.col, tps_size_names[o->v]);
            stack[sp++] = v;
            continue;
        }
        uint64_t b = stack[--sp], a = stack[--sp], r = 0;
        bool ok = true;
        const char *why = "overflows 64 bits";
        switch (o->op) {
        case '+': ok = tps_add_u64(a, b, &r); break;
        case '-': ok = tps_sub_u64(a, b, &r); why = "is negative"; break;
        case '*': ok = tps_mul_u64(a, b, &r); break;
        default:
            if (b == 0) {
                ok = false;
                why = "divides by zero";
            } else if (a % b != 0) {
                ok = false;
                why = "is not an exact division";
            } else {
                r = a / b;
            }
        }
        if (!ok)
            return tps_fail(err, TPS_EINVALID, "%s: expression '%s' (%s:%zu:%zu): %llu %c %llu %s", ctx, e->text,
                            file, e->at.line, e->at.col, (unsigned long long)a, o->op, (unsigned long long)b, why);
        stack[sp++] = r;
    }
    *out = stack[0];
    return TPS_OK;
}

void tps_expr_release(tps_expr *e)
{
    if (!e) return;
    free(e->code);
    free(e->text);
    e->code = NULL;
    e->text = NULL;
    e->n = 0;
}
