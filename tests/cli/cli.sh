#!/bin/sh
# The command line itself: help generated from the option tables (one screen each), the man
# page in sync with it, --version, usage errors (exit 2, "tpshard CMD:" prefix, a suggestion
# and a hint), --json, the progress line on a terminal only, -v file listing, and the
# serving stacks' file name templates.
. "${TPS_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/cli/lib.sh"
MAN="$TPS_TOP/cmd/tpshard.1"
L="$FIX/models/tiny-llama"
SRC="$L/model.safetensors"
PY=/usr/bin/python3

# The command list comes from the binary's overview, so a new command is covered by itself.
"$TPSHARD" --help >overview 2>err
rc=$?
cmds=$(awk '/^Commands:/ {on=1; next} on && /^$/ {exit} on && /^  [a-z]/ {print $1}' overview)
n=$(echo $cmds | wc -w)
if [ $rc -eq 0 ] && [ "$n" -ge 8 ] && [ ! -s err ] && grep -q "^  5  backend unavailable" overview; then
    ok "tpshard --help lists $n commands and the exit codes"
else
    notok "tpshard --help lists the commands and the exit codes"
    echo "#   exit $rc, commands: $cmds"
fi
lines=$(wc -l <overview)
cols=$(awk '{ if (length > m) m = length } END { print m + 0 }' overview)
[ "$lines" -le 24 ] && [ "$cols" -le 80 ] && ok "tpshard --help fits 80x24 ($cols x $lines)" ||
    notok "tpshard --help is $cols columns x $lines lines"
expect_exit 2 "Usage: tpshard COMMAND" "tpshard without a command: exit 2 and the overview on stderr" "$TPSHARD"

# Each command's help: exit 0, on stdout, 80x24, the exit codes, the same text both ways.
for c in $cmds; do
    "$TPSHARD" "$c" --help >"h.$c" 2>err
    rc=$?
    "$TPSHARD" help "$c" >"hh.$c" 2>>err
    lines=$(wc -l <"h.$c")
    cols=$(awk '{ if (length > m) m = length } END { print m + 0 }' "h.$c")
    if [ $rc -eq 0 ] && [ ! -s err ] && grep -q "^Usage: tpshard $c" "h.$c" && grep -q "^Options:" "h.$c" &&
        grep -q "2 usage, 3 invalid input, 4 I/O, 5 no backend" "h.$c" && cmp -s "h.$c" "hh.$c" &&
        [ "$lines" -le 24 ] && [ "$cols" -le 80 ]; then
        ok "$c --help: exit 0, fits 80x24 ($cols x $lines), exit codes, same as 'tpshard help $c'"
    else
        notok "$c --help: exit 0, fits 80x24, exit codes, same as 'tpshard help $c'"
        echo "#   exit $rc, $cols columns x $lines lines"
        sed 's/^/#   /' err | head -5
    fi
    # -v adds what did not fit (the details paragraphs) and drops nothing: every word of the
    # short help is in the long one (whose usage line and option column may be laid out wider).
    "$TPSHARD" "$c" --help -v >"v.$c"
    # In the long help every option's text starts in one column (no narrowing to fit a screen).
    starts=$(awk '/^Options:/ {on = 1; next} on && /^$/ {exit}
        on && /^  (-[a-zA-Z], |    )?--/ && !/^  -[a-zA-Z], --[a-z-]+:/ { match($0, /^  (-[a-zA-Z], |    )?--[^ ]+( [^ ]+)? +/); print RLENGTH }' "v.$c" | sort -u)
    [ "$(printf '%s\n' "$starts" | wc -l)" -eq 1 ] && ok "$c --help -v: the option texts start in one column ($starts)" ||
        notok "$c --help -v: option texts start in columns $(echo $starts)"
    if [ "$(wc -l <"v.$c")" -gt "$(wc -l <"h.$c")" ]; then
        tr -s ' ' '\n' <"h.$c" | sort -u >short.words
        tr -s ' ' '\n' <"v.$c" | sort -u >long.words
        comm -23 short.words long.words | grep -vx '\[OPTIONS\]' >missing
        [ ! -s missing ] && ok "$c --help -v adds the details the short help leaves out" ||
            { notok "$c --help -v adds the details"; sed 's/^/#   missing: /' missing | head -5; }
    fi
done

# Long options of a help text: the tokens of its Options section.
help_opts() {
    awk '/^Options:/ {on=1; next} on && /^$/ {exit} on' "$1" |
        grep -oE -- '^(  |      )(-[a-zA-Z], )?--[a-z][a-z0-9-]*|--[a-z][a-z0-9-]*:' | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u
}
# The man page source with groff's \- as plain '-'.
sed 's/\\-/-/g' "$MAN" >man.txt
# A command's man section, from its .SS heading to the next heading.
man_section() {
    awk -v c="$1" '/^\.S[SH] / { on = index($0, "\"tpshard " c " ") == 5 || $0 == ".SS \"tpshard " c "\""; next } on' man.txt
}
allopts=0
for c in $cmds; do
    help_opts "h.$c" >"opts.$c"
    man_section "$c" >"man.$c"
    k=$(wc -l <"opts.$c")
    allopts=$((allopts + k))
    # each as an entry of its own (the line after a .TP; a missing .TP runs an option into the
    # paragraph above it) or named where the section says it is "as for" another command
    awk '/^\.TP/ {getline; print} /^(are|is) as for/ {print prev} {prev = $0}' "man.$c" >"tp.$c"
    missing=""
    for opt in $(grep -v -e '^--help$' -e '^--quiet$' -e '^--verbose$' "opts.$c"); do
        grep -q -- "$opt\\b" "tp.$c" || missing="$missing $opt"
    done
    # and the other way: every option the man page documents for c, c accepts
    extra=""
    for opt in $(awk '/^\.TP/ {getline; print}' "man.$c" | grep -o -- '--[a-z][a-z0-9-]*' | sort -u); do
        grep -qx -- "$opt" "opts.$c" || extra="$extra $opt"
    done
    if [ -s "man.$c" ] && grep -qx -- "--help" "opts.$c" && [ -z "$missing" ] && [ -z "$extra" ]; then
        ok "man page: section for $c documents exactly its $k long options"
    else
        notok "man page: section for $c documents exactly its long options"
        echo "#   in --help, not in the man page section:${missing:- none}"
        echo "#   in the man page section, not accepted:${extra:- none}"
        [ -s "man.$c" ] || echo "#   no .SS \"tpshard $c ...\" section"
    fi
done
for o in --help --quiet --verbose; do grep -q -- "$o" man.txt || notok "man page lacks common option $o"; done
codes=$(awk '/^\.SH EXIT STATUS/ {on=1; next} /^\.SH/ {on=0} on && /^\.B [0-9]$/ {printf "%s", $2}' man.txt)
[ "$codes" = 012345 ] && ok "man page: EXIT STATUS lists 0 to 5" || notok "man page exit codes: '$codes'"
ver=$("$TPSHARD" --version)
[ "$ver" = "$("$TPSHARD" version)" ] && echo "$ver" | grep -Eq '^tpshard [0-9]+\.[0-9]+\.[0-9]+$' &&
    grep -q "^\.TH TPSHARD 1 .*\"$ver\"" "$MAN" && ok "--version and version agree ($ver), as does the man page" ||
    notok "--version '$ver' vs version '$("$TPSHARD" version)' vs man page: $(grep '^\.TH' "$MAN")"
if command -v man >/dev/null 2>&1; then
    MANWIDTH=80 man -l "$MAN" >man.out 2>man.err
    [ -s man.out ] && ! grep -q "warning" man.err && ok "man -l renders the man page without warnings" ||
        { notok "man -l cmd/tpshard.1"; sed 's/^/#   /' man.err | head -5; }
else
    skip "man -l cmd/tpshard.1: no man on this machine"
fi

# Usage errors: exit 2; every stderr line "tpshard CMD: ..."; a suggestion or the help hint.
usage_case() { # name fragment cmd args...
    name=$1 frag=$2 c=$3
    shift 3
    "$TPSHARD" "$c" "$@" >out 2>err
    rc=$?
    if [ $rc -eq 2 ] && grep -qF -- "$frag" err && grep -qF "tpshard $c: see 'tpshard $c --help'" err &&
        ! grep -qv "^tpshard $c: " err && [ ! -s out ]; then
        ok "$name"
    else
        notok "$name"
        echo "#   exit $rc, stdout $(wc -c <out) bytes; stderr:"
        sed 's/^/#   /' err | head -5
    fi
}
for c in $cmds; do
    usage_case "$c: unknown option, exit 2 with the hint" "tpshard $c: unknown option '--no-such-option'" "$c" --no-such-option
done
usage_case "misspelt option suggests the right one" "did you mean '--tp'?" split "$SRC" --tpp 2
usage_case "a single-dash long option suggests --tp" "unknown option '-tp'; did you mean '--tp'?" split "$SRC" -tp 2
usage_case "a transposition suggests --output" "did you mean '--output'?" split "$SRC" --outptu x
usage_case "an option's prefix suggests the option" "did you mean '--max-shard-size'?" split "$SRC" --max-shard 5GB
usage_case "--tp 3x refused" "--tp expects a non-negative integer, not '3x'" split "$SRC" --tp 3x
usage_case "--tp -1 refused" "not '-1'" split "$SRC" --tp -1
usage_case "--tp beyond 64 bits refused" "--tp 99999999999999999999999: too large" plan "$SRC" --tp 99999999999999999999999
usage_case "--tp 0 refused" "--tp N is required (N >= 1)" plan "$SRC" --tp 0 --preset llama
usage_case "--max-shard-size 5XB refused" "--max-shard-size expects a size" split "$SRC" --max-shard-size 5XB
usage_case "--rtol abc refused" "--rtol expects a number, not 'abc'" verify x --rtol abc
usage_case "a value for a flag refused" "option '--force' takes no value" split "$SRC" --force=yes
usage_case "a missing value refused" "option '--tp' needs a value (N)" split "$SRC" --tp
usage_case "a missing argument refused" "missing argument; usage: tpshard check DIR" check
usage_case "an extra argument refused" "unexpected argument 'b'" inspect a b
usage_case "--dtype f8 refused" "--dtype expects bf16, f16 or f32, not 'f8'" split "$SRC" --tp 2 --preset llama --dtype f8 -o x
usage_case "an unknown preset: exit 2 and the list" "unknown preset 'lama'" plan "$SRC" --tp 2 --preset lama
"$TPSHARD" splt >out 2>err
rc=$?
[ $rc -eq 2 ] && grep -qF "tpshard: unknown command 'splt'; did you mean 'split'?" err &&
    grep -qF "see 'tpshard --help'" err && ok "a misspelt command suggests the right one" ||
    { notok "a misspelt command: exit $rc"; sed 's/^/#   /' err; }
[ ! -e x ] && ok "no usage error wrote anything" || notok "a refused command wrote x"

# --json: valid JSON on stdout with the fields CI reads, for inspect, plan, check and verify.
"$TPSHARD" split "$SRC" --tp 2 --preset llama -o s2 -q
json_case() { # name python-assertion cmd args...
    name=$1 assertion=$2
    shift 2
    "$TPSHARD" "$@" >j.out 2>j.err
    rc=$?
    if $PY -c "import json,sys; d=json.load(open('j.out')); sys.exit(0 if ($assertion) else 1)" 2>j.py; then
        ok "$name"
    else
        notok "$name"
        echo "#   exit $rc"
        sed 's/^/#   /' j.err j.py | head -5
    fi
}
json_case "inspect --json" "len(d['tensors']) == 21 and d['totals']['tensors'] == 21" inspect "$SRC" --json
json_case "plan --json: every tensor with 2 rank shapes" \
    "d['tp'] == 2 and len(d['tensors']) == 21 and all(len(t['rank_shapes']) == 2 for t in d['tensors'])" \
    plan "$SRC" --tp 2 --preset llama --json
json_case "plan --dtype f32 --json: every dtype F32, 4 bytes an element" \
    "all(t['dtype'] == 'F32' for t in d['tensors']) and d['rank_bytes'] == [sum(4 * __import__('math').prod(t['rank_shapes'][r]) for t in d['tensors']) for r in range(2)]" \
    plan "$SRC" --tp 2 --preset llama --dtype f32 --json
json_case "check --json: ok with counts" "d['ok'] is True and d['tp'] == 2 and d['findings'] == []" check s2 --json
json_case "verify --json: every layer passes" "d['pass'] is True and d['tp'] == 2 and [l['layer'] for l in d['layers']] == [0, 1]" verify s2 --json

# Progress: one rate-limited line on a terminal; nothing in a file or with -q.
"$TPSHARD" split "$SRC" --tp 2 --preset llama -o p0 2>p0.err >/dev/null
[ ! -s p0.err ] && ok "split: no progress when stderr is a file" || { notok "split wrote to stderr"; head -3 p0.err | cat -v | sed 's/^/#   /'; }
if command -v script >/dev/null 2>&1 && script -qc true /dev/null </dev/null >/dev/null 2>&1; then
    on_tty() { # file command...: runs the command with stdout and stderr on a pseudo-terminal
        f=$1
        shift
        script -qec "$*" /dev/null </dev/null >"$f" 2>&1
    }
    for c in split reshard merge check verify; do
        case $c in
        split) args="split $SRC --tp 2 --preset llama -o tty-split" ;;
        reshard) args="reshard s2 --tp 1 -o tty-reshard" ;;
        merge) args="merge s2 -o tty-merged.safetensors" ;;
        check) args="check s2" ;;
        verify) args="verify s2 --layer all" ;;
        esac
        start=$(date +%s)
        on_tty "tty.$c" "$TPSHARD" $args
        rc=$?
        secs=$(($(date +%s) - start + 1))
        draws=$(grep -o "$(printf '\r')$(printf '\033')\[K$c [0-9]" "tty.$c" | wc -l)
        # verify also draws each layer and each stage within it as it starts (about 8 a layer),
        # so that a layer running for seconds shows what it is doing
        most=$((5 * secs + 2))
        [ $c = verify ] && most=$((most + 2 * 8))
        # the last draw shows everything done, with the rate, the ETA and a tensor name, whose
        # head is cut to "..." when it does not fit (which tensor is last depends on timing:
        # check walks tensors on several threads)
        last=$(tr '\r' '\n' <"tty.$c" | grep "^$(printf '\033')\[K$c [0-9]" | tail -1)
        if [ $rc -eq 0 ] && [ "$draws" -ge 1 ] && [ "$draws" -le "$most" ] &&
            echo "$last" | grep -Eq "$c [0-9.]+ [kMG]?B / [0-9.]+ [kMG]?B +100%  [0-9.]+ GB/s  ETA [0-9]+:[0-9]{2}  (model|lm_head|layer 1: done|\.\.\.[a-z_.0-9]+$)"; then
            ok "$c on a terminal: $draws progress draw(s) in ${secs}s (at most 5/s), bytes, %, GB/s, ETA, tensor"
        else
            notok "$c on a terminal: progress line"
            echo "#   exit $rc, $draws draws in ${secs}s, last: $(echo "$last" | cat -v)"
        fi
    done
    # verify's layer lines go to the same terminal: the progress line is erased before each
    layers=$(tr '\r' '\n' <tty.verify | grep -c "^\($(printf '\033')\[K\)\{0,1\}layer [01]    BF16 .* ok$")
    [ "$layers" -eq 2 ] && ok "verify on a terminal: both layer lines whole, the progress line erased before each" ||
        { notok "verify on a terminal: the layer lines are broken by the progress line"; cat -v tty.verify | sed 's/^/#   /'; }
    # ...and while a layer runs, its number and stage stay on the line (drawn when it starts,
    # not erased until the layer's report line is printed)
    for stage in "layer 0 (model.layers.0.)" "layer 0: loading, checking bytes" \
        "layer 1: ranks: attention" "layer 1: ranks: mlp" "layer 1: reference: mlp"; do
        if tr '\r' '\n' <tty.verify | grep -q "^$(printf '\033')\[Kverify .*  $stage\$"; then
            ok "verify on a terminal: the progress line shows '$stage'"
        else
            notok "verify on a terminal: no progress line showing '$stage'"
            tr '\r' '\n' <tty.verify | cat -v | sed 's/^/#   /' | head -30
        fi
    done
    on_tty tty.q "$TPSHARD" split "$SRC" --tp 2 --preset llama -o tty-q -q
    [ $? -eq 0 ] && ! grep -q "GB/s" tty.q && ok "split -q on a terminal: no progress line" || notok "split -q showed progress"
else
    skip "progress on a terminal: no usable script(1) (util-linux) to make a pseudo-terminal"
fi

# -v lists every file written, as it completes, and nothing else on stdout but the summary.
"$TPSHARD" split "$SRC" --tp 2 --preset llama --max-shard-size 60KB -o v1 -v >v.out 2>v.err
$PY - <<'PY' >v.chk 2>&1
import json, os, re
m = json.load(open("v1/tpshard.json"))
want = sorted((f["name"], f["bytes"]) for f in m["files"])
got = [re.fullmatch(r"wrote (\S+) \((.+)\)", l) for l in open("v.out").read().splitlines()[:-1]]
assert all(got), open("v.out").read()
names = sorted(g.group(1) for g in got)
assert names == [w[0] for w in want], (names, want)
for g in got:
    assert os.path.getsize(os.path.join("v1", g.group(1))) == dict(want)[g.group(1)]
print(len(names))
PY
[ $? -eq 0 ] && ok "split -v lists each of the $(cat v.chk) files it wrote" || { notok "split -v listing"; sed 's/^/#   /' v.chk | head; }
"$TPSHARD" reshard s2 --tp 1 -o v2 -v >v2.out 2>&1
grep -qx "wrote model-rank-0-of-1.safetensors (.*)" v2.out && ok "reshard -v lists its file" || notok "reshard -v"
"$TPSHARD" merge s2 -o v3.safetensors -v >v3.out 2>&1
grep -qx "wrote v3.safetensors (.*)" v3.out && ok "merge -v lists its file" || notok "merge -v: $(cat v3.out)"

# Names serving stacks load as they are: vLLM's sharded state and TensorRT-LLM's rank files.
"$TPSHARD" split "$SRC" --tp 2 --preset llama --max-shard-size 60KB \
    --name-template 'model-rank-{rank}-part-{part}.safetensors' -o vllm -q
parts0=$(ls vllm | grep -c '^model-rank-0-part-[0-9]*\.safetensors$')
parts1=$(ls vllm | grep -c '^model-rank-1-part-[0-9]*\.safetensors$')
[ "$parts0" -ge 2 ] && [ "$parts0" = "$parts1" ] && [ -f vllm/model-rank-0-part-0.safetensors ] &&
    [ -f vllm/model-rank-0-of-2.safetensors.index.json ] && [ -f vllm/model-rank-1-of-2.safetensors.index.json ] &&
    "$TPSHARD" check vllm -q >/dev/null && ok "vLLM template: $parts0 parts per rank from 0, per-rank indexes, check passes" ||
    notok "vLLM template: $(ls vllm | tr '\n' ' ')"
"$TPSHARD" split "$SRC" --tp 2 --preset llama --name-template 'rank{rank}.safetensors' -o trt -q
[ "$(ls trt | tr '\n' ' ')" = "rank0.safetensors rank1.safetensors tpshard.json " ] && "$TPSHARD" check trt -q >/dev/null &&
    cmp -s trt/rank1.safetensors s2/model-rank-1-of-2.safetensors &&
    ok "TensorRT-LLM template: rank0/rank1.safetensors, the same bytes as the default names" ||
    notok "TensorRT-LLM template: $(ls trt | tr '\n' ' ')"
"$TPSHARD" reshard trt --tp 1 --name-template 'rank{rank}.safetensors' -o trt1 -q &&
    [ "$(ls trt1 | tr '\n' ' ')" = "rank0.safetensors tpshard.json " ] && ok "reshard keeps a TensorRT-LLM template" ||
    notok "reshard with rank{rank}.safetensors"
"$TPSHARD" reshard vllm --tp 1 -o whole -q && cmp -s whole/model-rank-0-of-1.safetensors v2/model-rank-0-of-1.safetensors &&
    ok "reshard of a parts set to one file equals reshard of the plain set" || notok "reshard from parts"
expect_exit 2 "'rank{rank}.safetensors' lacks {part}" "a size cap with a template lacking {part}: exit 2 naming the template" \
    "$TPSHARD" split "$SRC" --tp 2 --preset llama --max-shard-size 60KB --name-template 'rank{rank}.safetensors' -o bad
expect_exit 2 "lacks {rank}" "a template without {rank} at tp 2: exit 2" \
    "$TPSHARD" reshard s2 --tp 2 --name-template 'model.safetensors' -o bad
expect_exit 2 "not a plain file name" "a template with a '/': exit 2" \
    "$TPSHARD" split "$SRC" --tp 2 --preset llama --name-template 'a/{rank}.safetensors' -o bad
[ ! -e bad ] && ok "refused templates wrote nothing" || notok "a refused template wrote bad/"
"$TPSHARD" split "$SRC" --tp 2 --preset llama --dtype f32 --dry-run >dry.out 2>&1
[ $? -eq 0 ] && grep -q "^model.layers.0.mlp.down_proj.weight  *F32 " dry.out && ! grep -q " BF16 " dry.out &&
    ok "split --dtype f32 --dry-run shows the converted dtype" || notok "dry-run with --dtype"
