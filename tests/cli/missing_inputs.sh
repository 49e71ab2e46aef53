#!/bin/sh
# A missing input is a missing file (issue 38): every command that reads a path says
# "PATH: No such file or directory" and exits 3 before it asks anything of it, never what it
# would have looked for beside it (a config.json, a manifest) and never a usage error, with
# or without the options that change where it looks; an input named by an option (verify's
# --source and --config) is checked before a backend is asked for, so a missing file is
# exit 3 even where the backend is not there.
. "${TPS_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/cli/lib.sh"

gone=$T/no/such
"$TPSHARD" split "$FIX/models/tiny-llama/model.safetensors" --tp 2 -o set -q ||
    notok "split of the tiny Llama"

missing() { # NAME PATH COMMAND...: exit 3 naming PATH, and no word of config.json or a manifest
    m_name=$1 m_path=$2
    shift 2
    expect_exit 3 "$m_path: No such file or directory" "$m_name" "$@"
    if grep -qiE 'config\.json|tpshard\.json|--preset|usage' "$T/.err"; then
        notok "$m_name: says only that the file is missing"
        sed 's/^/#   /' "$T/.err" | head -5
    else
        ok "$m_name: says only that the file is missing"
    fi
}
missing "split of a missing file, no --preset" "$gone/model.safetensors" "$TPSHARD" split "$gone/model.safetensors" --tp 2 -o out
[ -e out ] && notok "split of a missing file left an output directory" || ok "split of a missing file wrote nothing"
missing "split of a missing file, --preset llama" "$gone/model.safetensors" "$TPSHARD" split "$gone/model.safetensors" --tp 2 -o out --preset llama
missing "plan of a missing file" "$gone" "$TPSHARD" plan "$gone" --tp 2
missing "inspect of a missing file" "$gone" "$TPSHARD" inspect "$gone"
missing "check of a missing set" "$gone" "$TPSHARD" check "$gone"
missing "reshard of a missing set" "$gone" "$TPSHARD" reshard "$gone" --tp 4 -o out
missing "merge of a missing set" "$gone" "$TPSHARD" merge "$gone" -o out
missing "verify of a missing set" "$gone" "$TPSHARD" verify "$gone"
missing "verify --source of a missing file, before the cuda backend is asked for" "$gone" \
    "$TPSHARD" verify set --source "$gone" --backend cuda
missing "verify --config of a missing file" "$gone" "$TPSHARD" verify set --config "$gone"
