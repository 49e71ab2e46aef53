#!/bin/sh
# tpshard layout: --list, --preset round trips through --check, errors with file:line:col.
. "${TPS_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/cli/lib.sh"

# --list names exactly the presets of lib/presets, each on a line of its own with a
# description (indented lines continue it: architectures, aliases).
presets=$(cd "$TPS_TOP/lib/presets" && ls -- *.yaml | sed 's/\.yaml$//' | LC_ALL=C sort)
"$TPSHARD" layout --list >"$T/list" 2>"$T/err"
rc=$?
names=$(awk '/^[^ ]/ {print $1}' "$T/list" | LC_ALL=C sort | tr '\n' ' ')
if [ "$rc" -eq 0 ] && [ "$names" = "$(echo $presets) " ] && ! awk '/^[^ ]/ && NF < 3 {bad=1} END {exit !bad}' "$T/list"; then
    ok "layout --list lists the presets of lib/presets with descriptions"
else
    notok "layout --list lists the presets of lib/presets with descriptions"
    echo "#   exit $rc, names: $names"
    sed 's/^/#   /' "$T/list" "$T/err"
fi

# Each preset prints as YAML that --check accepts; the text is the file in lib/presets.
for p in $presets; do
    if "$TPSHARD" layout --preset "$p" >"$T/$p.yaml" 2>"$T/err" && cmp -s "$T/$p.yaml" "$TPS_TOP/lib/presets/$p.yaml" &&
        "$TPSHARD" layout --check "$T/$p.yaml" >"$T/out" 2>&1 && grep -q "^$T/$p.yaml: ok, [0-9]* rules, block kind " "$T/out"; then
        ok "layout --preset $p prints lib/presets/$p.yaml, and --check accepts it"
    else
        notok "layout --preset $p prints lib/presets/$p.yaml, and --check accepts it"
        sed 's/^/#   /' "$T/err" "$T/out" 2>/dev/null | head -10
    fi
done

# A typo in a key: exit 3, file:line:col of the key.
printf 'rules:\n  - match: model.norm.weight\n    split: replicate\n  - match: lm_head.weight\n    splt: column\n' >bad-key.yaml
expect_exit 3 "tpshard layout: bad-key.yaml:5:5: unknown key 'splt' in rule" \
    "layout --check: unknown key gives exit 3 with file:line:col" "$TPSHARD" layout --check bad-key.yaml

# YAML that does not parse.
printf 'rules:\n  - match: [a, b\n    split: column\n' >bad-syntax.yaml
expect_exit 3 "tpshard layout: bad-syntax.yaml:3:" "layout --check: YAML syntax error gives exit 3 with file:line:col" \
    "$TPSHARD" layout --check bad-syntax.yaml

# An expression naming a size that does not exist.
printf 'rules:\n  - match: "*.q.weight"\n    split: column\n    size: heads*head_dimm\n' >bad-expr.yaml
expect_exit 3 "tpshard layout: bad-expr.yaml:4:17: size 'heads*head_dimm': unknown size" \
    "layout --check: unknown size in an expression gives exit 3 with file:line:col" "$TPSHARD" layout --check bad-expr.yaml

expect_exit 3 "nothing.yaml: cannot open layout" "layout --check: a missing file gives exit 3" \
    "$TPSHARD" layout --check nothing.yaml
expect_exit 2 "unknown preset 'lama' (presets: $(echo $presets | sed 's/ /, /g'))" \
    "layout --preset with an unknown name gives exit 2 and the list" "$TPSHARD" layout --preset lama
expect_exit 2 "give exactly one of --list, --preset NAME or --check FILE" "layout without a mode gives exit 2" \
    "$TPSHARD" layout
expect_exit 2 "give exactly one of" "layout with two modes gives exit 2" "$TPSHARD" layout --list --preset llama
