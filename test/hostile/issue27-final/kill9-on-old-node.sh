#!/usr/bin/env bash
# Issue 27, final hostile pass: in a clone, `node bin/effect-gym.js run ...` started by the system's
# Node 20 runs again on the clone's Node 24 as a child process. `kill -9` of the process the user
# started (README: "--resume continues a run that was interrupted or killed (kill -9 included)")
# leaves that child running, orphaned, still writing the log; `--resume` is refused while it lives
# ("being written by another run (process N)"), and the "killed" run completes on its own.
# Run from the repository root after `npm ci`, on a machine whose /usr/bin/node is older than 24:
#   bash test/hostile/issue27-final/kill9-on-old-node.sh
set -u
root=$(pwd); dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
old=${OLD_NODE:-/usr/bin/node}
"$old" -e 'process.exit(Number(process.versions.node.split(".")[0]) < 24 ? 0 : 1)' || { echo "skip: $old is Node >= 24"; exit 0; }
for i in $(seq 0 2999); do echo "{\"env_config\": {\"seed\": $i, \"size\": 8}}"; done > "$dir/rows.jsonl"
cd "$dir"
"$old" "$root/bin/effect-gym.js" run --dataset rows.jsonl --env frozen_lake --policy random --policy-option latency_ms=2 \
  --num-generations 8 --output log.jsonl --overwrite > run.out 2>&1 & pid=$!
sleep 1.5
children=$(pgrep -P $pid || true)
kill -9 $pid; wait $pid 2>/dev/null; echo "kill -9 $pid: exit $?"
sleep 0.5
# (a process that ended and was not yet reaped, state Z, is gone: this machine's PID 1 may not reap orphans)
left=$(for c in $children; do s=$(ps -o stat= -p $c 2>/dev/null); [ -n "$s" ] && [ "${s#Z}" = "$s" ] && echo $c; done)
before=$(wc -l < log.jsonl); sleep 1; after=$(wc -l < log.jsonl)
echo "log lines 1 s apart after the kill: $before, $after"
if [ -n "$left" ]; then
  echo "BUG: the run is still running after kill -9 of its process: $(ps -o pid=,cmd= -p $left | cut -c1-100)"
  kill -TERM $left 2>/dev/null; sleep 1
  exit 1
fi
echo "OK: nothing left running"
