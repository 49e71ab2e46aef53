/* The walker both targets: readers use (lib/targets/target_section.h): the section found
 * (an alias followed only when asked), fields dispatched by key, lists appended, names as
 * one or a list, and failures at the node's line and column. */
#include <stdlib.h>
#include <string.h>

#include "lib/targets/target_section.h"
#include "tps_test.h"

static const char text[] = "name: t\n"
                           "targets:\n"
                           "  a:\n"
                           "    one: x\n"
                           "    list: [p, q, r]\n"
                           "  b: a\n"
                           "  c: [1]\n";

TEST(open_finds_sections)
{
    tps_error err;
    tps_error_clear(&err);
    tps_section s;
    CHECK(tps_section_open(&s, text, "t.yaml", "a", false, NULL, "testing", &err) == TPS_OK);
    CHECK(s.node != NULL);
    CHECK_STR(tps_section_text(&s, s.node, "one"), "x");
    CHECK(tps_section_text(&s, s.node, "list") == NULL);
    tps_section_close(&s);
    CHECK(tps_section_open(&s, text, "t.yaml", "b", true, NULL, "testing", &err) == TPS_OK);
    CHECK(s.node != NULL); /* b: a, followed */
    tps_section_close(&s);
    CHECK(tps_section_open(&s, text, "t.yaml", "b", false, NULL, "testing", &err) == TPS_OK);
    CHECK(s.node == NULL); /* not followed: a scalar is no section */
    tps_section_close(&s);
    CHECK(tps_section_open(&s, text, "t.yaml", "c", true, NULL, "testing", &err) == TPS_OK);
    CHECK(s.node == NULL);
    tps_section_close(&s);
    CHECK(tps_section_open(&s, "a: [\n", "t.yaml", "a", true, NULL, "testing", &err) == TPS_EINVALID);
    CHECK_STR(err.msg, "t.yaml: the layout is not valid YAML");
    tps_section_close(&s);
}

static tps_status read_one(tps_section *s, const yaml_node_t *k, const yaml_node_t *v, void *obj)
{
    (void)s, (void)k;
    *(const char **)obj = tps_yaml_scalar(v);
    return TPS_OK;
}

static tps_status item(tps_section *s, const yaml_node_t *k, const yaml_node_t *v, void *elem, void *arg)
{
    (void)k, (void)arg;
    const char *t = tps_yaml_scalar(v);
    if (strcmp(t, "q") == 0 && arg) return tps_section_bad(s, v, "no q");
    return (*(char **)elem = strdup(t)) ? TPS_OK : tps_section_oom(s);
}

TEST(fields_and_lists)
{
    tps_error err;
    tps_error_clear(&err);
    tps_section s;
    CHECK(tps_section_open(&s, text, "t.yaml", "a", false, "a", "testing", &err) == TPS_OK);
    const char *one = NULL;
    const tps_section_field only_one[] = {{"one", read_one}, {NULL, NULL}};
    CHECK(tps_section_fields(&s, s.node, only_one, &one, "unknown key (one)") == TPS_EINVALID);
    CHECK_STR(err.msg, "t.yaml:5:5: targets: a: unknown key (one)");
    CHECK_STR(one, "x");
    char **names = NULL;
    size_t n = 0;
    yaml_node_t *list = tps_section_key(&s, s.node, "list");
    CHECK(tps_section_list(&s, list, false, sizeof *names, (void **)&names, &n, "a list", item, NULL) == TPS_OK);
    CHECK(tps_section_list(&s, list, false, sizeof *names, (void **)&names, &n, "a list", item, NULL) == TPS_OK);
    CHECK_EQ_U64(n, 6); /* appended */
    CHECK_STR(names[5], "r");
    CHECK(names[6] == NULL); /* the spare element */
    tps_error_clear(&err);
    CHECK(tps_section_list(&s, list, false, sizeof *names, (void **)&names, &n, "a list", item, &n) == TPS_EINVALID);
    CHECK_EQ_U64(n, 8); /* the item that failed is counted, zeroed */
    CHECK(names[7] == NULL);
    CHECK_STR(err.msg, "t.yaml:5:15: targets: a: no q");
    tps_error_clear(&err);
    CHECK(tps_section_list(&s, s.node, false, sizeof *names, (void **)&names, &n, "a list", item, NULL) ==
          TPS_EINVALID);
    CHECK_STR(err.msg, "t.yaml:4:5: targets: a: a list");
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    tps_section_close(&s);
}

TEST(names_one_or_a_list)
{
    tps_error err;
    tps_error_clear(&err);
    tps_section s;
    static const tps_section_says says = {"not a list", "not a name", "too many", "empty"};
    CHECK(tps_section_open(&s, text, "t.yaml", "a", false, NULL, "testing", &err) == TPS_OK);
    char *out[2] = {NULL, NULL};
    size_t n = 0;
    CHECK(tps_section_names(&s, tps_section_key(&s, s.node, "one"), out, 2, &n, &says) == TPS_OK);
    CHECK_EQ_U64(n, 1);
    CHECK_STR(out[0], "x");
    free(out[0]);
    out[0] = NULL;
    CHECK(tps_section_names(&s, tps_section_key(&s, s.node, "list"), out, 2, &n, &says) == TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "too many");
    for (size_t i = 0; i < n; i++) free(out[i]);
    tps_error_clear(&err);
    CHECK(tps_section_names(&s, NULL, out, 2, &n, &says) == TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "not a list");
    tps_section_close(&s);
}

int main(void)
{
    RUN(open_finds_sections);
    RUN(fields_and_lists);
    RUN(names_one_or_a_list);
    return tps_test_done();
}
