#!/bin/sh
# make gpu-check: the CUDA backend on the GPUs there are, in one run sized for a few minutes.
#  1. every model fixture (testdata/models/tiny-*, every family) split at the largest of
#     tp 8, 4, 2, 1 that split accepts and verified with --backend cuda, --layer all and
#     --whole-model, with --emulate when the GPUs are fewer than the ranks;
#  2. NCCL itself: tiny-llama at one rank per visible GPU (at most 8), layers and whole model;
#  3. a Llama-3-8B-shaped two-layer BF16 checkpoint (hidden 4096, 32 heads, 8 KV heads,
#     intermediate 14336; tests/gpu/gen_llama.c) split at each tp of GPU_CHECK_TP and verified
#     against the float64 reference from the source, one table row per tp with the errors,
#     the upload rate and the time of a layer;
#  4. the rate (issue 36): the host-to-device link measured through the plugin's own uploads
#     (link_bw: pinned, as the reference's weights go, and pageable, as the ranks' slices go),
#     then at each tp `verify --layer all` of the 8B-shaped set timed against `cat` of its
#     shards (both from the page cache): shard GB verified per second, as a multiple of cat's
#     time and as a fraction of the pinned link.
# Every step has a time limit and a failure stops the run with the step's log; exit 0 only
# when everything passed.
# Knobs: GPU_CHECK_TP="1 2 4 8", GPU_CHECK_DIR (scratch parent, default $TMPDIR or /tmp;
# needs ~5 GB), GPU_CHECK_KEEP=1 keeps the scratch directory, GPU_CHECK_TOKENS=16,
# GPU_CHECK_PARTS="families nccl 8b rate" (a subset runs only those parts; rate needs 8b's sets).
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
TPSHARD=${TPSHARD:-$top/tpshard}
GEN=${GEN_LLAMA:-$top/build/gpu/gen_llama}
LINK=${LINK_BW:-$top/build/gpu/link_bw}
PLUGIN=${CUDA_PLUGIN:-$top/build/libtpshard-cuda.so}
TPS=${GPU_CHECK_TP:-1 2 4 8}
TOKENS=${GPU_CHECK_TOKENS:-16}
PARTS=${GPU_CHECK_PARTS:-families nccl 8b rate}
start=$(date +%s)

say() { echo "gpu-check: $*"; }
fail() {
    echo "gpu-check: FAILED: $*" >&2
    exit 1
}
for f in "$TPSHARD" "$GEN" "$LINK"; do
    [ -x "$f" ] || fail "$f is missing: run it through 'make gpu-check', which builds it"
done
command -v timeout >/dev/null 2>&1 || fail "needs timeout(1) (coreutils) to bound every step"

work=$(mktemp -d "${GPU_CHECK_DIR:-${TMPDIR:-/tmp}}/tpshard-gpu-check.XXXXXX") || fail "cannot make a scratch directory"
if [ -n "${GPU_CHECK_KEEP:-}" ]; then say "keeping $work"; else trap 'rm -rf "$work"' EXIT; fi
trap 'echo "gpu-check: interrupted" >&2; exit 130' INT TERM

# step LIMIT NAME CMD...: runs CMD with a time limit, its output in $work/NAME.log.
step() {
    limit=$1 name=$2
    shift 2
    t0=$(date +%s)
    timeout -k 10 "$limit" "$@" >"$work/$name.log" 2>&1
    rc=$?
    say "$name: exit $rc in $(($(date +%s) - t0)) s"
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        echo "gpu-check: $name ran past its ${limit} s limit and was killed" >>"$work/$name.log"
    fi
    return $rc
}
show_log() { sed 's/^/    /' "$work/$1.log" | tail -"${2:-20}" >&2; }

# GPUs: nvidia-smi when present; otherwise tpshard's own refusal tells whether to emulate.
gpus=
if command -v nvidia-smi >/dev/null 2>&1; then
    if timeout 60 nvidia-smi -L >"$work/gpus.txt" 2>&1; then
        gpus=$(grep -c '^GPU ' "$work/gpus.txt")
        sed 's/^/    /' "$work/gpus.txt"
    else
        sed 's/^/    /' "$work/gpus.txt" >&2
        fail "nvidia-smi -L failed: no usable GPU or driver"
    fi
    [ "$gpus" -gt 0 ] || fail "nvidia-smi lists no GPU"
    say "$gpus GPU(s)"
else
    say "no nvidia-smi: finding out from tpshard whether ranks must share GPUs"
fi

part() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
# emulate_for TP: --emulate when there are fewer GPUs than TP (or nvidia-smi is missing).
emulate_for() { if [ -z "$gpus" ] || [ "$gpus" -lt "$1" ]; then echo --emulate; fi; }

if part families; then
    fam_rows=
    for src in "$top"/testdata/models/tiny-*; do
        model=${src##*/tiny-}
        for tp in 8 4 2 1; do
            "$TPSHARD" split "$src" --tp "$tp" -o "$work/f-$model" -q >/dev/null 2>&1 && break
            rm -rf "$work/f-$model"
        done
        [ -d "$work/f-$model" ] || fail "$model: split refused every tp"
        em=$(emulate_for "$tp")
        step 120 "f-$model" sh -c '"$1" verify "$2" --layer all --backend cuda $3 && "$1" verify "$2" --whole-model --backend cuda $3' \
            sh "$TPSHARD" "$work/f-$model" "$em" || {
            show_log "f-$model" 30
            fail "$model tp $tp: verify --backend cuda $em"
        }
        worst=$(awk '$1 == "layer" { for (i = 1; i < NF; i++) if ($i == "rel" && $(i + 1) + 0 > m) m = $(i + 1) + 0 }
                     END { printf "%.3g", m }' "$work/f-$model.log")
        fam_rows="$fam_rows$(printf '%-22s %-4s %-10s %s' "$model" "$tp" "${em:-NCCL}" "$worst")
"
        rm -rf "$work/f-$model"
    done
    echo
    printf '%-22s %-4s %-10s %s\n' family tp joined "worst layer rel err"
    printf '%s' "$fam_rows"
    say "every family fixture passed on the GPU (--layer all and --whole-model)"
fi

if part nccl; then
    n=${gpus:-1}
    [ "$n" -gt 8 ] && n=8
    "$TPSHARD" split "$top/testdata/models/tiny-llama" --tp "$n" -o "$work/nccl" -q || fail "split tiny-llama at tp $n"
    step 120 nccl sh -c '"$1" verify "$2" --layer all --backend cuda && "$1" verify "$2" --whole-model --backend cuda' \
        sh "$TPSHARD" "$work/nccl" || {
        show_log nccl 30
        fail "tiny-llama at tp $n on $n GPU(s) with NCCL"
    }
    grep -q "NCCL all-reduce" "$work/nccl.log" || fail "tp $n on $n GPU(s): the report does not say NCCL joined the ranks"
    grep "backend cuda" "$work/nccl.log" | head -1
    say "NCCL with one rank per GPU ($n) passed, layers and whole model"
fi

part 8b || { say "done in $(($(date +%s) - start)) s"; exit 0; }
link_pinned=
if part rate; then
    step 120 link "$LINK" "$PLUGIN" 256 5 || {
        show_log link
        fail "measuring the host-to-device link (link_bw)"
    }
    cat "$work/link.log"
    link_pinned=$(sed -n 's/^link: pinned \([0-9.]*\) GB\/s.*/\1/p' "$work/link.log")
    [ -n "$link_pinned" ] || fail "link_bw printed no pinned rate"
fi
now() { date +%s.%N; }
rates=
mkdir -p "$work/src" || fail "cannot write $work"
step 180 generate "$GEN" "$work/src" 2 2048 || {
    show_log generate
    fail "generating the checkpoint"
}
cat "$work/generate.log"

rows=
for tp in $TPS; do
    out="$work/tp$tp"
    step 300 "split-tp$tp" "$TPSHARD" split "$work/src" --tp "$tp" --preset llama -o "$out" -q || {
        show_log "split-tp$tp"
        fail "split at tp $tp"
    }
    emulate=
    if [ -n "$gpus" ] && [ "$gpus" -lt "$tp" ]; then emulate=--emulate; fi
    step 300 "verify-tp$tp" "$TPSHARD" verify "$out" --source "$work/src" --backend cuda --tokens "$TOKENS" $emulate
    rc=$?
    if [ $rc -eq 5 ] && [ -z "$gpus" ] && [ -z "$emulate" ] && grep -q -- "--emulate" "$work/verify-tp$tp.log"; then
        emulate=--emulate
        step 300 "verify-tp$tp" "$TPSHARD" verify "$out" --source "$work/src" --backend cuda --tokens "$TOKENS" \
            $emulate
        rc=$?
    fi
    cat "$work/verify-tp$tp.log"
    if [ $rc -ne 0 ]; then
        show_log "verify-tp$tp" 30
        fail "verify --backend cuda $emulate at tp $tp (exit $rc)"
    fi
    log="$work/verify-tp$tp.log"
    if grep -q "NCCL NOT exercised" "$log"; then
        backend="cuda emulated (no NCCL)"
        rpd=$(sed -n 's/.*GPUs*, \([0-9]*\) per GPU.*/\1/p' "$log" | head -1)
    else
        grep -q "NCCL all-reduce" "$log" || fail "tp $tp: the report does not say how the ranks were joined"
        backend="cuda + NCCL"
        rpd=1
    fi
    # Worst errors over both layers and stages; mean upload rate and layer time.
    stats=$(awk '
        $1 == "layer" && $NF == "ok" {
            for (i = 1; i < NF; i++) {
                if ($i == "abs" && $(i + 1) + 0 > ma) ma = $(i + 1) + 0
                if ($i == "rel" && $(i + 1) + 0 > mr) mr = $(i + 1) + 0
            }
            layers++
        }
        $1 == "device:" { gbps += $6; ms += $9; g++ }
        END {
            if (!layers || !g) exit 1
            printf "%.3g %.3g %.2f %.2f %d", ma, mr, gbps / g, ms / g, layers
        }' "$log") || fail "tp $tp: no per-layer results in the report"
    set -- $stats
    [ "$5" -eq 2 ] || fail "tp $tp: $5 layers verified, expected 2"
    rows="$rows$(printf '%-4s %-24s %-14s %-12s %-12s %-12s %s' "$tp" "$backend" "${rpd:-?}" "$1" "$2" "$3" "$4")
"
    if part rate; then
        # Shard bytes verified per second: cat first (it also warms the page cache for both).
        cat "$out"/*.safetensors >/dev/null
        t0=$(now)
        cat "$out"/*.safetensors >/dev/null
        t1=$(now)
        step 300 "rate-tp$tp" "$TPSHARD" verify "$out" --layer all --backend cuda --tokens "$TOKENS" $emulate || {
            show_log "rate-tp$tp"
            fail "verify --layer all --backend cuda at tp $tp (exit $rc)"
        }
        t2=$(now)
        bytes=$(wc -c "$out"/*.safetensors | awk 'END { print $1 }')
        rates="$rates$(awk -v b="$bytes" -v c="$t1" -v c0="$t0" -v v="$t2" -v l="$link_pinned" -v tp="$tp" 'BEGIN {
            cat = b / (c - c0) / 1e9; ver = b / (v - c) / 1e9
            printf "%-4s %-10.3f %-10.2f %-12.2f %-10.1f %-12.2f %.0f%%", tp, b / 1e9, cat, ver, cat / ver, l, 100 * ver / l
        }')
"
    fi
    [ -n "${GPU_CHECK_KEEP:-}" ] || rm -rf "$out"
done

echo
printf '%-4s %-24s %-14s %-12s %-12s %-12s %s\n' tp backend ranks/device "max err" "rel err" "upload GB/s" "layer ms"
printf '%s' "$rows"
total=$(($(date +%s) - start))
echo
say "every tp passed in $total s (BF16, rtol 0.016; errors are the worst over 2 layers, attention and MLP outputs)"
[ "$total" -le 300 ] || say "WARNING: took more than the 5 minutes it is sized for"
if part rate; then
    echo
    printf '%-4s %-10s %-10s %-12s %-10s %-12s %s\n' tp "shards GB" "cat GB/s" "verify GB/s" "x cat" "link GB/s" "of link"
    printf '%s' "$rates"
    say "verify --layer all: shard bytes verified per second (wall time, process start included) against cat of" \
        "the same shards from the page cache and the pinned host-to-device link (link_bw)"
fi
