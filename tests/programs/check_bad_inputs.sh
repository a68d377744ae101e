#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs every program on each bad input of a corpus and checks the command-line
# contract (README): exit status 2, exactly one line on stderr that matches the
# expected text (the field, the value, what was expected), within a bounded time
# and address space (setrlimit through `ulimit -v`), and nothing on stdout that
# looks like garbage (NaN, infinity, a negative number).
#   check_bad_inputs.sh BIN_DIR CORPUS [--table]
# BIN_DIR holds the programs (build/default/examples/*/); CORPUS is bad_inputs.txt:
#   program|arguments|expected stderr regex (ERE)
# @D@ in the arguments is the scratch directory with the generated fixtures.
# Prints one line per failure and, with --table, the counts per program.
set -u
bin_dir=$(cd "$1" && pwd) corpus=$2 table=${3:-}
time_limit=${DISAGMOE_BAD_INPUT_SECONDS:-20}
mem_kib=${DISAGMOE_BAD_INPUT_KIB:-4194304}  # 4 GiB of address space per run
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
here=$(cd "$(dirname "$0")" && pwd)
"$here/make_fixtures.sh" "$scratch" || { echo "fixtures failed"; exit 1; }

declare -A tried crashes hangs wrong_exit garbage slowest
failures=0
while IFS='|' read -r prog args expect; do
  [[ -z "$prog" || "$prog" == \#* ]] && continue
  exe=$(find "$bin_dir" -type f -name "$prog" -perm -u+x | head -n 1)
  if [[ -z "$exe" ]]; then continue; fi  # program not built in this configuration
  args_shown=$args; args=${args//@D@/$scratch}; args=${args//@T@/$here/..}
  tried[$prog]=$(( ${tried[$prog]:-0} + 1 ))
  out="$scratch/stdout" err="$scratch/stderr"
  start=$(date +%s%N)
  # shellcheck disable=SC2086  # the arguments are split on blanks on purpose
  ( ulimit -v "$mem_kib"; cd "$scratch" && exec timeout -s KILL "$time_limit" "$exe" $args ) >"$out" 2>"$err" </dev/null
  rc=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  (( ms > ${slowest[$prog]:-0} )) && slowest[$prog]=$ms
  lines=$(wc -l <"$err")
  why=""
  if (( rc == 137 )); then why="hang (killed after ${time_limit}s)"; hangs[$prog]=$(( ${hangs[$prog]:-0} + 1 ))
  elif (( rc > 128 )); then why="crash (signal $((rc - 128)))"; crashes[$prog]=$(( ${crashes[$prog]:-0} + 1 ))
  elif (( rc != 2 )) || (( lines != 1 )) || ! grep -Eq -- "$expect" "$err" || (( $(wc -c <"$err") > 2000 )); then
    why="exit $rc, $lines stderr lines"; wrong_exit[$prog]=$(( ${wrong_exit[$prog]:-0} + 1 ))
  elif grep -Eiq '(^|[^a-z])(nan|inf|infinity)([^a-z]|$)|(^|[ :(\[])-[0-9]' "$out"; then
    why="garbage on stdout"; garbage[$prog]=$(( ${garbage[$prog]:-0} + 1 ))
  fi
  if [[ -n "$why" ]]; then
    failures=$((failures + 1))
    echo "FAIL $prog $args_shown: $why (${ms} ms): $(head -c 300 "$err" | head -n 2 | tr '\n' ' ')"
  fi
done <"$corpus"

if [[ "$table" == --table ]]; then
  echo "| program | inputs | crashes | hangs | wrong exit/message | garbage output | slowest (ms) |"
  echo "|---|---|---|---|---|---|---|"
  for p in $(printf '%s\n' "${!tried[@]}" | sort); do
    echo "| $p | ${tried[$p]} | ${crashes[$p]:-0} | ${hangs[$p]:-0} | ${wrong_exit[$p]:-0} | ${garbage[$p]:-0} | ${slowest[$p]:-0} |"
  done
fi
echo "bad inputs: $failures failures"
exit $(( failures > 0 ))
