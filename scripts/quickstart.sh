#!/usr/bin/env bash
# One command from a fresh machine to an answer: set up, run the `quick` sweep, write the report.
# Extra arguments go to `lab run`, e.g. scripts/quickstart.sh --levels 1,10,100 --out /tmp/lab
# Works on a fresh clone: results/ (or the folder --out names) need not exist yet; `lab run` makes
# it. Any failure prints the command and line that failed (scripts/lib.sh).
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
loud_errors quickstart
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out=results  # lab run's --out: the run directory this sweep makes is the new one in there
args=("$@")
for i in "${!args[@]}"; do
  case ${args[i]} in
    --out) out=${args[i + 1]:-$out} ;;
    --out=*) out=${args[i]#--out=} ;;
  esac
done
# The run directories in $out, one a line; none (not an error) while $out does not exist yet.
listing() {
  [[ -d $out ]] || return 0
  find "$out" -mindepth 1 -maxdepth 1 -type d | sort
}
before=$(listing)
.venv/bin/lab run --scenario quick "$@"
run=$(comm -13 <(echo "$before") <(listing))
[[ -n $run && $run != *$'\n'* ]] || { echo "quickstart: no new run directory in $out" >&2; exit 1; }
.venv/bin/lab report "$run"
