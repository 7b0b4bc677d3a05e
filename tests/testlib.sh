# testlib.sh - sourced by the shell tests (tests/cli, tests/mpi): a
# temporary folder $T removed at exit, ok/bad/check that count and print
# one line per check, and finish, the summary line and exit status.
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0; passes=0
ok()   { passes=$((passes+1)); echo "ok - $*"; }
bad()  { fails=$((fails+1)); echo "FAIL - $*"; }
# check DESCRIPTION 'CONDITION': ok when the condition (a shell string) holds; its
# status is the condition's, so that `check ... || cat details` shows them
check() { if eval "$2"; then ok "$1"; else bad "$1"; return 1; fi; }
finish() { echo "$passes passed, $fails failed"; [[ $fails -eq 0 ]]; }
