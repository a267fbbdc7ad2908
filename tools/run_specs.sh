#!/usr/bin/env bash
# Runs every busted spec under LuaJIT and ends with the line "N passed, N failed"
# (preceded by the failures' names and messages, and by "N skipped" when specs were
# pending, e.g. GPU specs without a GPU).
set -u
cd "$(dirname "$0")/.."
# the interpreter of the Python interop specs: make pydeps' venv when it is there
if [ -z "${CRESCENT_PYTHON:-}" ] && [ -x build/pyenv/bin/python ]; then export CRESCENT_PYTHON=$PWD/build/pyenv/bin/python; fi
log=$(mktemp)
# specs never write into the user's run folders: a suite that starts without runs/ (a
# fresh clone, CI) must not leave one (spec/helper.lua names the in-process offender)
had_runs=0; [ -e runs ] && had_runs=1
luajit /usr/bin/busted -o utfTerminal "$@" 2>&1 | tee "$log"
summary=$(grep -E '[0-9]+ success(es)? / [0-9]+ failures? / [0-9]+ errors? / [0-9]+ pending' "$log" | tail -1)
# the failures again, each with its spec's name and first message line, where the end of
# the output (all CI shows) can carry them
failures=$(grep -A2 -E '^(Failure|Error) → ' "$log" | grep -v '^--$' | cut -c1-300)
rm -f "$log"
if [ -z "$summary" ]; then
  echo "busted printed no summary: it crashed before finishing"
  echo "0 passed, 1 failed"
  exit 1
fi
read -r ok fail err pend < <(echo "$summary" | sed -E 's/^[^0-9]*([0-9]+) success(es)? \/ ([0-9]+) failures? \/ ([0-9]+) errors? \/ ([0-9]+) pending.*/\1 \3 \4 \5/')
failed=$((fail + err))
if [ "$had_runs" -eq 0 ] && [ -e runs ]; then
  failures="${failures:+$failures
}a spec wrote into the user's runs/ folder (give its run run.dir=<a temporary folder>): $(cd runs && ls | head -5 | tr '\n' ' ')"
  failed=$((failed + 1))
fi
if [ -n "$failures" ]; then echo "what failed:"; echo "$failures"; fi
if [ "$pend" -gt 0 ]; then echo "$pend skipped (pending specs: see above why)"; fi
echo "$ok passed, $failed failed"
[ "$failed" -eq 0 ]
