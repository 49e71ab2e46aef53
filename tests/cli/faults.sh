#!/bin/sh
# Faults, interruptions and hostile surroundings (issue 9).  Each case checks: the exit code
# README.md's "Exit codes" gives (3 invalid input, 4 I/O or resource, 2 usage), a message
# naming what went wrong, the input unchanged (checksums before/after), and no output that
# `check` accepts (no output directory, no temporary directory left behind).
#   disk full (ulimit -f, SIGXFSZ ignored) in split, reshard, merge to a directory and a file
#   SIGINT / SIGTERM mid-write; SIGKILL mid-write (the leftover is refused and cleaned)
#   a read-only output directory; an output equal to or inside the input
#   a source that shrinks, grows or is rewritten mid-read (the process is stopped mid-copy)
#   a shard replaced by another rank's file
#   symlinks planted at the output's temporary and final names; memory bounded under ulimit -v
. "${TPS_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/cli/lib.sh"

MODEL=$FIX/models/tiny-llama
cp -r "$MODEL" model
sum_of() { find "$@" -type f -exec cksum {} + 2>/dev/null | sort; }
model_sum=$(sum_of model)

# leftovers DIR: prints whatever of DIR or its temporary siblings exists.
leftovers() {
    parent=$(dirname "$1") base=$(basename "$1")
    ls -d "$1" "$parent/.$base".tpshard-tmp.* "$parent/.$base".tmp.* 2>/dev/null
}

# outcome NAME CODE FRAGMENT OUTPUT INPUT...: checks the last command's $rc and $T/.err,
# that OUTPUT left nothing behind and that the inputs' checksums are $want_sum.
outcome() {
    name=$1 code=$2 frag=$3 output=$4
    shift 4
    why=
    if [ "$rc" -ne "$code" ]; then
        why="exit $rc, expected $code"
    elif ! grep -qF -- "$frag" "$T/.err"; then
        why="stderr lacks '$frag'"
    elif [ -n "$(leftovers "$output")" ]; then
        why="left behind: $(leftovers "$output" | tr '\n' ' ')"
    elif [ "$(sum_of "$@")" != "$want_sum" ]; then
        why="the input changed"
    fi
    if [ -z "$why" ]; then ok "$name"; else
        notok "$name"
        echo "#   $why; stderr:"
        sed 's/^/#   /' "$T/.err" | head -8
    fi
}

# ---- disk full: a file-size limit, with SIGXFSZ ignored so write() fails with EFBIG ----
# limited BLOCKS COMMAND...: runs COMMAND under ulimit -f BLOCKS (512-byte blocks).
limited() {
    blocks=$1
    shift
    (trap '' XFSZ && ulimit -f "$blocks" && exec "$@") >"$T/.out" 2>"$T/.err"
}
if (trap '' XFSZ && ulimit -f 8 && exec dd if=/dev/zero of="$T/fsz" bs=1024 count=16) 2>/dev/null ||
    [ "$(wc -c <"$T/fsz" 2>/dev/null || echo 0)" -gt 4096 ]; then
    for c in split reshard merge-dir merge-file; do skip "disk full during $c: ulimit -f does not limit file size here"; done
else
    "$TPSHARD" split model --tp 2 --preset llama -o s2 >/dev/null 2>&1 || notok "setup: split tiny-llama --tp 2"
    want_sum=$model_sum
    limited 100 "$TPSHARD" split model --tp 2 --preset llama -o full1
    rc=$?
    outcome "disk full during split: exit 4, nothing left, source untouched" 4 "File too large" full1 model
    want_sum=$(sum_of s2)
    limited 100 "$TPSHARD" reshard s2 --tp 4 -o full2
    rc=$?
    outcome "disk full during reshard: exit 4, nothing left, shards untouched" 4 "File too large" full2 s2
    limited 100 "$TPSHARD" merge s2 -o full3/
    rc=$?
    outcome "disk full during merge to a directory: exit 4, nothing left" 4 "File too large" full3 s2
    limited 100 "$TPSHARD" merge s2 -o full4.safetensors
    rc=$?
    outcome "disk full during merge to a file: exit 4, no file or temporary left" 4 "File too large" full4.safetensors s2
fi

# ---- a source big enough (sparse) that a signal lands mid-copy ----
python3 - <<'EOF'
import json, struct
rows, cols = 4096, 16384
h = json.dumps({"w": {"dtype": "F32", "shape": [rows, cols], "data_offsets": [0, rows * cols * 4]}}).encode()
h += b" " * (-len(h) % 8)
with open("big.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    f.truncate(8 + len(h) + rows * cols * 4)
EOF
printf 'rules:\n  - match: w\n    split: column\n' >big.yaml
big_sum=$(sum_of big.safetensors)
big_size=$(wc -c <big.safetensors)

# step_until PID TEST...: runs the stopped process PID in slices of ~10 ms (SIGCONT, sleep,
# SIGSTOP) until TEST succeeds, and leaves it stopped there, so that "mid-write" does not
# depend on how fast this machine writes.  Fails when PID ends first or after ~2000 slices.
step_until() {
    sp=$1
    shift
    i=0
    while [ $i -lt 2000 ]; do
        "$@" && return 0
        kill -0 "$sp" 2>/dev/null || return 1
        kill -CONT "$sp"
        sleep 0.01
        kill -STOP "$sp" 2>/dev/null
        i=$((i + 1))
    done
    return 1
}
# partial_shard DIR: DIR holds a file with some bytes in it.
partial_shard() {
    for f in "$1"/* "$1"/.[!.]*; do
        [ -s "$f" ] && return 0
    done
    return 1
}
# start_big OUT: starts a split of big.safetensors into OUT in the background ($pid) and
# leaves it stopped once its temporary directory holds a partly written shard.
start_big() {
    "$TPSHARD" split big.safetensors --tp 2 --layout big.yaml -o "$1" >"$T/.out" 2>"$T/.err" &
    pid=$!
    kill -STOP $pid
    step_until $pid partial_shard ".$1.tpshard-tmp.$pid"
}

for sig in INT TERM; do
    want_sum=$big_sum
    want_rc=130
    [ $sig = TERM ] && want_rc=143
    if start_big "sig$sig"; then
        kill -$sig $pid
        kill -CONT $pid
        wait $pid
        rc=$?
        outcome "SIG$sig mid-write: exit $want_rc naming the signal, temporary files removed, no output" $want_rc \
            "interrupted by signal" "sig$sig" big.safetensors
    else
        kill -CONT $pid
        wait $pid
        notok "SIG$sig mid-write: the split never showed a partly written shard"
        sed 's/^/#   /' "$T/.err" | head -5
    fi
done

if start_big killed; then
    kill -KILL $pid
    wait $pid 2>/dev/null
    left=".killed.tpshard-tmp.$pid"
    if [ -d "$left" ] && [ ! -e killed ]; then ok "SIGKILL mid-write: only the temporary directory is left"; else
        notok "SIGKILL mid-write: only the temporary directory is left"
        ls -la | sed 's/^/#   /'
    fi
    # Killed before or after the manifest was written inside it: refused either way.
    "$TPSHARD" check "$left" >"$T/.out" 2>"$T/.err"
    rc=$?
    if [ $rc -ne 0 ] && grep -q "not a shard set" "$T/.err"; then ok "SIGKILL leftover: check refuses the temporary directory"
    else
        notok "SIGKILL leftover: check refuses the temporary directory"
        echo "#   exit $rc"
        sed 's/^/#   /' "$T/.err" | head -5
    fi
    expect_exit 3 "" "SIGKILL leftover: check of the never-published output fails" "$TPSHARD" check killed
    "$TPSHARD" split model --tp 2 --preset llama -o killed >"$T/.out" 2>"$T/.err"
    if [ $? -eq 0 ] && [ ! -e "$left" ] && "$TPSHARD" check killed >/dev/null 2>&1; then
        ok "SIGKILL leftover: the next run into the same output removes it and succeeds"
    else
        notok "SIGKILL leftover: the next run into the same output removes it and succeeds"
        ls -la | sed 's/^/#   /'
        sed 's/^/#   /' "$T/.err" | head -5
    fi
else
    kill -CONT $pid
    wait $pid
    notok "SIGKILL mid-write: the split never showed a partly written shard"
fi

# merge into one file writes it inside a temporary directory beside it: both must go.
"$TPSHARD" split big.safetensors --tp 2 --layout big.yaml -o bigset >/dev/null 2>&1 || notok "setup: split big.safetensors"
bigset_sum=$(sum_of bigset)
"$TPSHARD" merge bigset -o bigmerged.safetensors >"$T/.out" 2>"$T/.err" &
pid=$!
kill -STOP $pid
if step_until $pid partial_shard ".bigmerged.safetensors.tpshard-tmp.$pid"; then
    kill -INT $pid
    kill -CONT $pid
    wait $pid
    rc=$?
    want_sum=$bigset_sum
    outcome "SIGINT mid-merge into one file: exit 130, the temporary file removed, no output" 130 \
        "interrupted by signal" bigmerged.safetensors bigset
else
    kill -CONT $pid
    wait $pid
    notok "SIGINT mid-merge into one file: the merge never showed a partly written file"
    ls -la | sed 's/^/#   /'
fi
rm -rf bigset

# A complete set under a temporary name (a run killed between the manifest and the rename)
# is still not a shard set.
"$TPSHARD" split model --tp 2 --preset llama -o done >/dev/null 2>&1
cp -r done .done.tpshard-tmp.2147483640
expect_exit 1 "never published" "check refuses a complete shard set left under its temporary name" \
    "$TPSHARD" check .done.tpshard-tmp.2147483640
expect_exit 3 "never published" "reshard refuses a shard set left under its temporary name" \
    "$TPSHARD" reshard .done.tpshard-tmp.2147483640 --tp 1 -o from-tmp

# ---- a source that changes while it is read: stop the split mid-copy, change, continue ----
# changed NAME FRAGMENT COMMAND...: COMMAND changes big.safetensors while the split is stopped.
changed() {
    name=$1 frag=$2
    shift 2
    out=chg$((${chg:-0} + 1))
    chg=$((${chg:-0} + 1))
    if start_big "$out"; then
        "$@"
        want_sum=$(sum_of big.safetensors)
        kill -CONT $pid
        wait $pid
        rc=$?
        outcome "$name" 4 "$frag" "$out" big.safetensors
    else
        kill -CONT $pid
        wait $pid
        notok "$name: the split never showed a partly written shard"
    fi
}
changed "source shrinks mid-read: exit 4, no shard set" "big.safetensors" truncate -s 1000000 big.safetensors
truncate -s "$big_size" big.safetensors
changed "source grows mid-read: exit 4 naming the size change" "changed size" truncate -s +4096 big.safetensors
truncate -s "$big_size" big.safetensors
changed "source rewritten in place mid-read: exit 4, modified" "was modified" \
    sh -c 'sleep 0.02; printf x | dd of=big.safetensors bs=1 seek=200 conv=notrunc 2>/dev/null'
changed "source replaced by another file mid-read: exit 4" "replaced" \
    sh -c 'cp big.safetensors big.new && mv big.new big.safetensors'

# ---- output directory problems ----
want_sum=$model_sum
if [ "$(id -u)" = 0 ]; then
    # Permissions do not bind root: run as nobody, against a directory only root may write.
    if command -v setpriv >/dev/null 2>&1 && setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null &&
        setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$TPSHARD"; then
        as_other="setpriv --reuid=65534 --regid=65534 --clear-groups"
    else
        as_other=
    fi
else
    as_other=env
fi
if [ -z "$as_other" ]; then
    skip "read-only output directory: running as root without setpriv to drop to another user"
else
    chmod 755 "$T"
    chmod -R a+rX model
    mkdir ro
    chmod 555 ro
    $as_other "$TPSHARD" split model --tp 2 --preset llama -o ro/out >"$T/.out" 2>"$T/.err"
    rc=$?
    outcome "read-only output directory: exit 4, permission denied" 4 "Permission denied" ro/out model
fi

expect_exit 2 "must not be, contain or lie inside the input" "output equal to the input directory is refused" \
    "$TPSHARD" split model --tp 2 --preset llama -o model --force
expect_exit 2 "must not be, contain or lie inside the input" "output inside the input directory is refused" \
    "$TPSHARD" split model --tp 2 --preset llama -o model/out
"$TPSHARD" split model --tp 2 --preset llama -o s2b >/dev/null 2>&1
expect_exit 2 "must not be, contain or lie inside the input" "reshard into its own input is refused" \
    "$TPSHARD" reshard s2b --tp 1 -o s2b/sub
expect_exit 2 "must not be, contain or lie inside the input" "merge into its own shard set directory is refused" \
    "$TPSHARD" merge s2b -o s2b --force
if [ "$(sum_of model)" = "$model_sum" ] && [ ! -e model/out ]; then ok "refused outputs left the input untouched"; else
    notok "refused outputs left the input untouched"
fi

# ---- a shard set where one file was replaced by another rank's ----
cp -r s2b swapped
cp swapped/model-rank-1-of-2.safetensors swapped/model-rank-0-of-2.safetensors
expect_exit 1 "model-rank-0-of-2.safetensors" "check names a shard replaced by another rank's file" \
    "$TPSHARD" check swapped
expect_exit 3 "says tp_rank 1" "merge refuses a shard set with another rank's file" "$TPSHARD" merge swapped -o swapped.safetensors
[ -e swapped.safetensors ] && notok "merge of a swapped shard set left swapped.safetensors"

# ---- symlinks must never be followed when creating or removing output ----
mkdir victim
echo precious >victim/keep
# A leftover temporary name (dead PID) that is a symlink to a victim directory.
ln -s "$T/victim" .sl.tpshard-tmp.2147483646
"$TPSHARD" split model --tp 2 --preset llama -o sl >"$T/.out" 2>"$T/.err"
if [ -f victim/keep ] && [ ! -e .sl.tpshard-tmp.2147483646 ] && "$TPSHARD" check sl >/dev/null 2>&1; then
    ok "a symlink at a leftover temporary name is removed, not followed"
else
    notok "a symlink at a leftover temporary name is removed, not followed"
    ls -la . victim | sed 's/^/#   /'
fi
# --force into a directory whose shard names are symlinks to victim files: not a shard set
# of ours, so refused, and nothing is written through the links.
mkdir forced
ln -s "$T/victim/keep" forced/model-rank-0-of-2.safetensors
ln -s "$T/victim/keep" forced/tpshard.json
"$TPSHARD" split model --tp 2 --preset llama -o forced --force >"$T/.out" 2>"$T/.err"
rc=$?
if [ $rc -eq 3 ] && [ "$(cat victim/keep)" = precious ] && [ -L forced/tpshard.json ] &&
    [ -L forced/model-rank-0-of-2.safetensors ]; then
    ok "--force refuses a directory of symlinks and writes nothing through them"
else
    notok "--force refuses a directory of symlinks and writes nothing through them (exit $rc)"
    sed 's/^/#   /' "$T/.err" | head -5
fi
# merge --force onto a symlink: the link is replaced, its target untouched.
ln -s "$T/victim/keep" merged.safetensors
"$TPSHARD" merge s2b -o merged.safetensors --force >"$T/.out" 2>"$T/.err"
if [ "$(cat victim/keep)" = precious ] && [ ! -L merged.safetensors ] && [ -s merged.safetensors ]; then
    ok "merge --force onto a symlink replaces the link, not its target"
else
    notok "merge --force onto a symlink replaces the link, not its target"
    sed 's/^/#   /' "$T/.err" | head -5
fi
# Symlinks planted at the exact temporary names a run will use (its PID is known: the shell
# that sleeps then execs tpshard).
echo precious >victim/file
# A merged file is written inside a fresh temporary directory, so a link planted at the
# directory's name is removed (not followed) and the merge goes on.
sh -c 'sleep 1; exec "$0" merge s2b -o planted.safetensors' "$TPSHARD" >"$T/.out" 2>"$T/.err" &
pid=$!
ln -s "$T/victim" ".planted.safetensors.tpshard-tmp.$pid"
wait $pid
rc=$?
if [ $rc -eq 0 ] && [ "$(cat victim/file)" = precious ] && [ "$(ls victim | wc -l)" = 2 ] &&
    [ -s planted.safetensors ] && [ ! -e ".planted.safetensors.tpshard-tmp.$pid" ]; then
    ok "a symlink at the merge's temporary directory name is removed, never followed"
else
    notok "a symlink at the merge's temporary directory name is removed, never followed (exit $rc)"
    echo "#   exit $rc; victim: $(cat victim/file)"
    sed 's/^/#   /' "$T/.err" | head -5
fi
rm -f ".planted.safetensors.tmp.$pid"
sh -c 'sleep 1; exec "$0" split model --tp 2 --preset llama -o plantdir' "$TPSHARD" >"$T/.out" 2>"$T/.err" &
pid=$!
ln -s "$T/victim" ".plantdir.tpshard-tmp.$pid"
wait $pid
rc=$?
if [ $rc -eq 0 ] && [ "$(ls victim | tr '\n' ' ')" = "file keep " ] && "$TPSHARD" check plantdir >/dev/null 2>&1; then
    ok "a symlink at the output's temporary directory name is replaced, its target untouched"
else
    notok "a symlink at the output's temporary directory name is replaced, its target untouched"
    echo "#   exit $rc; victim holds: $(ls victim | tr '\n' ' ')"
    sed 's/^/#   /' "$T/.err" | head -5
fi
# An output directory that is a symlink is refused.
ln -s "$T/victim" linked
expect_exit 3 "not a directory" "an output path that is a symlink is refused" \
    "$TPSHARD" split model --tp 2 --preset llama -o linked --force
[ "$(ls victim | tr '\n' ' ')" = "file keep " ] || notok "the symlinked output wrote into its target"

# ---- memory bounded whatever a header claims: the catalogue under ulimit -v ----
# (A sanitizer build reserves terabytes of address space and cannot start under ulimit -v.)
vlimit_ok=true
# (The inner shell reports the abort, to /dev/null.)
{ sh -c 'ulimit -v 262144 && exec "$0" --help' "$TPSHARD" >/dev/null 2>&1 || vlimit_ok=false; } 2>/dev/null
tab=$(printf '\t')
bad=0 n=0
for cases in "$FIX"/bad/*/CASES; do
    $vlimit_ok || break
    dir=$(dirname "$cases")
    while IFS=$tab read -r file code frag sub; do
        case "$file" in '' | '#'*) continue ;; esac
        n=$((n + 1))
        # shellcheck disable=SC2046
        set -- $(printf '%s\n' "${sub:-inspect}" | sed "s|{fix}|$FIX|g")
        (ulimit -v 262144 && exec "$TPSHARD" "$@" "$dir/$file") </dev/null >/dev/null 2>"$T/.err"
        rc=$?
        if [ "$rc" -ne "$code" ]; then
            bad=$((bad + 1))
            echo "#   $(basename "$dir")/$file: exit $rc under ulimit -v 256 MiB, expected $code"
            sed 's/^/#     /' "$T/.err" | head -2
        fi
    done <"$cases"
done
if ! $vlimit_ok; then
    skip "catalogue under ulimit -v 256 MiB: $TPSHARD cannot start under ulimit -v (a sanitizer build?)"
elif [ "$n" -gt 0 ] && [ "$bad" -eq 0 ]; then ok "all $n catalogue cases keep their exit code under ulimit -v 256 MiB"; else
    notok "catalogue under ulimit -v 256 MiB: $bad of $n cases changed exit code"
fi

# ---- nothing in a checkpoint is executed ----
marker=/tmp/tpshard-pwned # what testdata/bad/pickle/subprocess_popen.bin would create
if [ -e "$marker" ]; then
    skip "hostile pickles run nothing: $marker exists already, so its absence cannot be checked"
else
    ran=0
    for f in "$FIX"/bad/pickle/*.bin "$FIX"/bad/torch/*.bin; do
        "$TPSHARD" inspect "$f" >/dev/null 2>&1
        "$TPSHARD" split "$f" --tp 2 --preset llama -o "pk$ran" >/dev/null 2>&1
        ran=$((ran + 1))
    done
    if [ ! -e "$marker" ] && [ -z "$(ls -d pk* 2>/dev/null)" ] && [ "$ran" -gt 20 ]; then
        ok "$ran hostile pickles: inspect and split run nothing and write nothing"
    else
        notok "hostile pickles: something ran or was written"
        ls -d "$marker" pk* 2>/dev/null | sed 's/^/#   /'
    fi
fi

# ---- sizes from headers are bounded before allocation ----
python3 - <<'EOF2'
import struct, zipfile
# A safetensors header length just under the 100 MB cap, in a 100-byte file.
open("claims_99mb.safetensors", "wb").write(struct.pack("<Q", 99999990) + b"{" * 92)
# A torch archive whose deflated data.pkl claims 4 GiB in the central directory.
with zipfile.ZipFile("claims_1tb.bin", "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
    z.writestr("archive/version", "3\n")
b = bytearray(open("claims_1tb.bin", "rb").read())
cd = b.find(b"PK\x01\x02")
struct.pack_into("<I", b, cd + 24, 0xFFFFFFFE)  # usize
open("claims_1tb.bin", "wb").write(bytes(b))
# A .npy whose shape claims 2^60 elements of a 3-element file.
h = b"{'descr': '<f4', 'fortran_order': False, 'shape': (1152921504606846976,), }"
h += b" " * (-(10 + len(h) + 1) % 64) + b"\n"
open("claims_2p60.npy", "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + b"\0" * 12)
EOF2
for f in claims_99mb.safetensors claims_1tb.bin claims_2p60.npy; do
    if ! $vlimit_ok; then
        skip "$f under ulimit -v 64 MiB: $TPSHARD cannot start under ulimit -v (a sanitizer build?)"
        continue
    fi
    (ulimit -v 65536 && exec "$TPSHARD" inspect "$f") >"$T/.out" 2>"$T/.err"
    rc=$?
    if [ $rc -eq 3 ] && grep -qF "$f" "$T/.err"; then ok "$f: refused under ulimit -v 64 MiB before allocating what it claims"
    else
        notok "$f: refused under ulimit -v 64 MiB before allocating what it claims"
        echo "#   exit $rc"
        sed 's/^/#   /' "$T/.err" | head -3
    fi
done
