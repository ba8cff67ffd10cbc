#!/usr/bin/env bash
# The README's test command, run the way a newcomer's machine often runs it: two busy processes
# (stress-ng --cpu 2), another program listening on 127.0.0.1:8765 (their own `gateway run`, which
# the README's first command leaves running) and SIGINT ignored (a suite started with `cmd &`, or
# by a CI wrapper). The suite must pass like that, round after round.
#
#   scripts/busy_suite.sh [ROUNDS]        default 3 (issue #28's check); stops at the first failure
#
# Each round's wall time, exit code and the pytest summary go to stdout; the whole output of a
# round to busy-suite-<round>.log in $BUSY_LOGS (default: a new temporary folder). Extra
# environment (GATEWAY_CI=1, GATEWAY_HEAVY=1) passes through to the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
logs=${BUSY_LOGS:-$(mktemp -d -t busy-suite.XXXXXX)}
mkdir -p "$logs"
# The README's second ```sh block: the test command, exactly as a newcomer copies it.
command=$(awk '/^```sh$/ {n++; next} /^```$/ {inside=0} n==2 && !done {print; done=1}' README.md)
[ -n "$command" ] || { echo "no test command found in README.md" >&2; exit 2; }

helpers=()
cleanup() {
  for pid in "${helpers[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
}
trap cleanup EXIT

if command -v stress-ng >/dev/null 2>&1; then
  stress-ng --cpu 2 --quiet &
  helpers+=($!)
else  # two shell loops are as busy
  for _ in 1 2; do (while :; do :; done) & helpers+=($!); done
fi

# Another program on 8765, unless one is there already (then that one plays the part).
if python3 -c 'import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(("127.0.0.1",8765))!=0)'; then
  echo "127.0.0.1:8765 is already taken by another program: it stays, as the user's gateway"
else
  python3 -c '
import socket, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8765))
s.listen()
while True:
    time.sleep(3600)
' &
  helpers+=($!)
fi

echo "load: two busy processes, 127.0.0.1:8765 held, SIGINT ignored; logs in $logs"
echo "command: $command"
for round in $(seq 1 "$rounds"); do
  log="$logs/busy-suite-$round.log"
  started=$(date +%s)
  set +e
  # `trap '' INT` here is what `cmd &` and nohup-style wrappers do: every child inherits it.
  (trap '' INT; exec bash -c "$command") >"$log" 2>&1 < /dev/null
  code=$?
  set -e
  took=$(( $(date +%s) - started ))
  summary=$(grep -E '(passed|failed|error)' "$log" | tail -1 || true)
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  echo "round $round: exit $code in $((took / 60)) m $((took % 60)) s (load $load): $summary"
  if grep -q INTERNALERROR "$log"; then
    echo "round $round: INTERNALERROR (see $log)"
    code=1
  fi
  [ "$code" -eq 0 ] || exit "$code"
done
echo "all $rounds rounds passed"
