#!/usr/bin/env bash
# Issue 27, final hostile pass: two command-line messages that did not say what was wrong (fixed; kept to show them).
# Run from the repository root after `npm ci`:  bash test/hostile/issue27-final/cli-messages.sh
set -u
root=$(pwd); dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
export PATH=$root/node_modules/.bin:$PATH
run() { node "$root/bin/effect-gym.js" run --dataset "$root/examples/frozen_lake.jsonl" --env frozen_lake --policy random "$@" 2>&1 | tail -1; }
echo "1. --step-timeout 2e9 (it read \"must be a number of seconds > 0\", without the 1e9 cap; now the cap is said, and Rollout.make keeps it too):"
run --output "$dir/a.jsonl" --step-timeout 2e9
echo "2. --output in a folder that does not exist (it named a temporary file of the run record; now the missing folder):"
run --output "$dir/no/such/folder/a.jsonl"
