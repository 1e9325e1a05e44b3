#!/usr/bin/env bash
# Issue 27, final hostile pass: a run stopped by SIGINT while its envs' close is slower than
# --close-timeout writes the trajectories it cut as complete groups (error: Timeout, phase close),
# and --resume keeps them: those rows are never run again, the resumed log is not an uninterrupted
# run's. Run from the repository root after `npm ci`:  bash test/hostile/issue27-final/resume-after-slow-close.sh
set -u
root=$(pwd); dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
export PATH=$root/node_modules/.bin:$PATH
cp "$root/test/hostile/issue27-final/slow_close_plugin.mjs" "$dir/plugin.mjs"
for i in $(seq 0 19); do echo "{\"env_config\": {\"i\": $i}}"; done > "$dir/rows.jsonl"
cd "$dir"
args="run --plugin plugin.mjs --dataset rows.jsonl --env slow_close --policy random --num-generations 2 --max-turns 30 --concurrency 8 --close-timeout 0.3 --output log.jsonl"
node "$root/bin/effect-gym.js" $args --overwrite > first.txt 2>&1 & pid=$!
sleep 2.5; kill -INT $pid; wait $pid; echo "first run: exit $?"
node "$root/bin/effect-gym.js" $args --resume > second.txt 2>&1; echo "resumed: exit $?"
# Every trajectory of this env runs its 30 turns (it is never done); a shorter one was cut by the SIGINT.
cut=$(node -e '
  const lines = require("fs").readFileSync("log.jsonl", "utf8").trim().split("\n").map((l) => JSON.parse(l))
  const short = lines.filter((o) => o.messages.filter((m) => m.role === "assistant").length < 30)
  console.log(short.map((o) => `row ${o.row} gen ${o.generation}: ${o.messages.filter((m) => m.role === "assistant").length} turns, ${o.error?.message ?? o.error}`).join("\n"))
  process.exitCode = short.length')
echo "$cut"
[ -z "$cut" ] && echo "OK: the resumed log is an uninterrupted run's" || { echo "BUG: cut trajectories kept in the resumed log"; exit 1; }
