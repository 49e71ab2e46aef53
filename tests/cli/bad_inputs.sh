#!/bin/sh
# Replays the malformed-file catalogue: every testdata/bad/<format>/CASES line, run as
# `tpshard SUBCOMMAND FILE` (default inspect).  A line is TAB-separated:
#     FILE  EXIT  FRAGMENT  [SUBCOMMAND]
# SUBCOMMAND may carry options after the subcommand's name (words separated by spaces,
# "{fix}" standing for the testdata directory); FILE comes last.
# FILE is relative to the CASES file; FRAGMENT must appear in stderr when EXIT is non-zero
# (which must also name the file and start with "tpshard SUBCOMMAND: "), or in stdout when
# EXIT is 0.  An empty FRAGMENT, or "-" when a SUBCOMMAND follows, checks no text.
# Lines starting with '#' and blank lines are skipped.
. "${TPS_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/cli/lib.sh"

tab=$(printf '\t')
limit=
command -v timeout >/dev/null 2>&1 && limit="timeout 60"
ncases=0
for cases in "$FIX"/bad/*/CASES; do
    [ -f "$cases" ] || continue
    dir=$(dirname "$cases")
    fmt=$(basename "$dir")
    while IFS=$tab read -r file code frag sub; do
        case "$file" in '' | '#'*) continue ;; esac
        [ "$frag" = - ] && frag=
        sub=${sub:-inspect}
        ncases=$((ncases + 1))
        name="$fmt/$file: $sub exits $code"
        # shellcheck disable=SC2046
        set -- $(printf '%s\n' "$sub" | sed "s|{fix}|$FIX|g")
        sub=$1
        # A hang (a parser gone exponential) is a failure, not a stuck test run.
        $limit "$TPSHARD" "$@" "$dir/$file" </dev/null >"$T/out" 2>"$T/err"
        rc=$?
        [ "$rc" -eq 124 ] && [ -n "$limit" ] && echo "(timed out after 60 s)" >>"$T/err"
        why=
        if [ "$rc" -ne "$code" ]; then
            why="exit $rc"
        elif [ "$code" -ne 0 ]; then
            if [ -n "$frag" ] && ! grep -qF -- "$frag" "$T/err"; then
                why="stderr lacks '$frag'"
            elif ! grep -qF -- "$file" "$T/err"; then
                why="stderr does not name the file"
            elif ! head -n 1 "$T/err" | grep -q "^tpshard $sub: "; then
                why="stderr does not start with 'tpshard $sub: '"
            fi
        elif [ -n "$frag" ] && ! grep -qF -- "$frag" "$T/out"; then
            why="stdout lacks '$frag'"
        fi
        if [ -z "$why" ]; then
            ok "$name"
        else
            notok "$name"
            echo "#   $why; stdout and stderr were:"
            cat "$T/out" "$T/err" | head -10 | sed 's/^/#   /'
        fi
    done <"$cases"
done
if [ "$ncases" -eq 0 ]; then
    notok "malformed-file catalogue: no cases found under $FIX/bad/*/CASES"
fi
