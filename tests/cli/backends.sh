#!/bin/sh
# tpshard backends: one line per verify backend, whether it runs here and on what or why not
# (issue 46), agreeing with what verify itself reports and does: cpu's GEMM is the one verify
# --json names; devsim runs; cuda, without a GPU, says what its plugin found and that there is
# no device, never that it is missing when it was built.
. "$TPS_TOP/tests/cli/lib.sh"
M="$FIX/models/tiny-llama"
"$TPSHARD" backends >list.txt 2>err.txt
rc=$?
[ $rc = 0 ] && [ "$(wc -l <err.txt)" = 0 ] && ok "backends exits 0, nothing on stderr" || notok "backends: exit $rc"
for b in cpu devsim cuda mpi; do
    grep -q "^$b " list.txt && ok "backends lists $b" || notok "backends lists $b"
done
"$TPSHARD" backends --json >list.json || notok "backends --json"
field() { # BACKEND KEY -> the value of KEY in that backend's --json object
    /usr/bin/python3 -c 'import json,sys; print(next(str(b[sys.argv[2]]) for b in json.load(open("list.json")) if b["backend"] == sys.argv[1]))' "$1" "$2"
}
"$TPSHARD" split "$M/model.safetensors" --tp 2 -q -o tp2 || notok "split"
gemm=$("$TPSHARD" verify tp2 --json | sed -n 's/.*"gemm": *"\([^"]*\)".*/\1/p')
case "$(field cpu detail)" in *"ranks' GEMM: $gemm;"*) ok "cpu: the GEMM verify reports ($gemm)" ;;
*) notok "cpu: '$(field cpu detail)' does not name verify's GEMM '$gemm'" ;; esac
[ "$(field devsim usable)" = True ] && "$TPSHARD" verify tp2 --backend devsim -q &&
    ok "devsim: usable, and verify runs on it" || notok "devsim: usable '$(field devsim usable)', $(field devsim detail)"
if [ -e /dev/nvidia0 ]; then
    skip "cuda on a machine without a GPU: this one has /dev/nvidia0"
elif [ -f "$TPS_TOP/build/libtpshard-cuda.so" ]; then
    d=$(field cuda detail)
    "$TPSHARD" verify tp2 --backend cuda -q 2>vc.err
    vrc=$?
    case "$d" in *"not built"*) notok "cuda: built, yet listed as not built: $d" ;;
    *GPU* | *device* | *driver*) [ "$(field cuda usable)" = False ] && [ $vrc = 5 ] &&
        ok "cuda without a GPU: not usable, says why ($d); verify --backend cuda exits 5" ||
        notok "cuda without a GPU: usable $(field cuda usable), verify exit $vrc" ;;
    *) notok "cuda without a GPU: the detail names neither GPU, device nor driver: $d" ;; esac
else
    case "$(field cuda detail)" in *"not built into this tpshard"*) ok "cuda: not built here, and says so" ;;
    *) notok "cuda: not built here: $(field cuda detail)" ;; esac
fi
if [ -f "$TPS_TOP/build/libtpshard-mpi.so" ]; then
    [ "$(field mpi usable)" = True ] && ok "mpi: its plugin loads" || notok "mpi: $(field mpi detail)"
else
    [ "$(field mpi usable)" = False ] && ok "mpi: not built here, and says so" || notok "mpi: $(field mpi detail)"
fi
