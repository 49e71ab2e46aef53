#!/bin/sh
# No circle between the files of lib/ formats/ verify/ cmd/: the code has a bottom and a top at
# every scale, so a reader (and the linker) can take it one file at a time.
#
# A node is a source file with its header (x.c and x.h are one node; a header without a .c
# declares and makes no node of its own).  A -> B when a file of A includes B's header, or
# when A's object refers to a symbol B's object defines (nm), so a call hidden behind a
# forward declaration or an internal header still counts.  Every strongly connected
# component of more than one node is reported with the arrows inside it.
#
# A circle that must stay needs a comment in the file whose arrow closes it, saying why:
#     circle-ok: verify/load/layer.c  <why>
# drops A's arrows to that node (and only those).
#
#   sh tests/lint/circles.sh [ROOT] [OBJDIR]     OBJDIR: where the .o files are (build/lint)
set -u
cd "${1:-$(dirname "$0")/../..}" || exit 2
objdir=${2:-build/lint}
tops="lib formats verify cmd"
work=$(mktemp -d "${TMPDIR:-/tmp}/tpshard-circles.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Modules: every x.c / x.cu (as x).
find $tops -type f \( -name '*.c' -o -name '*.cu' \) 2>/dev/null | sed 's/\.cu*$//' | sort -u >"$work/modules"

# Include arrows: FROM-MODULE TO-MODULE why, resolved as the compiler does (beside the file
# first, then from the top, -I.).
for f in $(find $tops -type f \( -name '*.[ch]' -o -name '*.cu' \) 2>/dev/null | sort); do
    grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
        sed 's/^\([0-9]*\):[^"]*"\([^"]*\)".*/\1 \2/' | while read -r line inc; do
        here=$(dirname "$f")/$inc
        if [ -e "$here" ]; then t=$(realpath -m --relative-to=. "$here"); else t=$inc; fi
        echo "${f%.*} ${t%.*} includes:$t($f:$line)"
    done
done >"$work/includes"

# Call arrows from the objects: defined and undefined symbols per module.
: >"$work/defs"
: >"$work/uses"
nobj=0
for o in $(cd "$objdir" 2>/dev/null && find $tops -name '*.o' 2>/dev/null | sort); do
    m=${o%.o}
    # an object whose source is gone (moved or removed since that build) says nothing of now
    [ -e "$m.c" ] || [ -e "$m.cu" ] || continue
    nobj=$((nobj + 1))
    nm -P "$objdir/$o" 2>/dev/null | awk -v m="$m" '
        $2 == "U" { print m, $1 >> "'"$work/uses"'"; next }
        $2 ~ /^[TDBRGSVW]$/ { print $1, m >> "'"$work/defs"'" }'
done
if [ "$nobj" -eq 0 ]; then
    echo "circles: no objects under $objdir/ (build it first: make lint builds it)"
    exit 2
fi

# Allowed arrows: "circle-ok: NODE" in a file of the module the arrow leaves.
grep -rnoE --include='*.[ch]' --include='*.cu' 'circle-ok: *[A-Za-z0-9_./-]+' $tops 2>/dev/null |
    sed 's/^\([^:]*\):[0-9]*:circle-ok: */\1 /' | while read -r f to; do echo "${f%.*} ${to%.*}"; done >"$work/allowed"

awk -v W="$work" '
    FILENAME == W "/modules" { mod[$1] = 1; n++; node[n] = $1; next }
    FILENAME == W "/allowed" { ok[$1 SUBSEP $2] = 1; next }
    FILENAME == W "/defs" { if (!($1 in def)) def[$1] = $2; next }
    FILENAME == W "/includes" { arrow($1, $2, $3); next }
    FILENAME == W "/uses" { if ($2 in def) arrow($1, def[$2], "calls:" $2); next }
    function arrow(a, b, why) {
        if (a == b || !(a in mod) || !(b in mod) || ((a SUBSEP b) in ok)) return
        if (!((a SUBSEP b) in edge)) { edge[a SUBSEP b] = why; out[a] = out[a] " " b }
    }
    END {
        # reach[a,b]: b reachable from a (a breadth-first walk from every node; a few hundred)
        for (i = 1; i <= n; i++) {
            s = node[i]; head = 1; tail = 0; delete seen
            q[++tail] = s; seen[s] = 1
            while (head <= tail) {
                v = q[head++]; k = split(out[v], nx, " ")
                for (j = 1; j <= k; j++) if (!(nx[j] in seen)) { seen[nx[j]] = 1; q[++tail] = nx[j]; reach[s SUBSEP nx[j]] = 1 }
            }
        }
        bad = 0
        for (i = 1; i <= n; i++) {
            a = node[i]
            if (a in done) continue
            comp = a; size = 1; done[a] = 1
            for (j = i + 1; j <= n; j++) {
                b = node[j]
                if (!(b in done) && ((a SUBSEP b) in reach) && ((b SUBSEP a) in reach)) { comp = comp " " b; size++; done[b] = 1 }
            }
            if (size < 2) continue
            bad++
            print "circle of " size ": " comp
            k = split(comp, members, " ")
            for (x = 1; x <= k; x++) for (y = 1; y <= k; y++)
                if ((members[x] SUBSEP members[y]) in edge) print "    " members[x] " -> " members[y] "  (" edge[members[x] SUBSEP members[y]] ")"
        }
        print "circles: " n " files of lib/ formats/ verify/ cmd/ (includes and calls), " bad " circle" (bad == 1 ? "" : "s")
        exit bad > 0
    }' "$work/modules" "$work/allowed" "$work/defs" "$work/includes" "$work/uses"
