#!/usr/bin/env python3
"""The Python side of the Python comparison (bench/workloads/python_compare.ts).

A stdlib-only (Python 3.9+) asyncio rollout loop that does what ms-swift's gym rollout does
(swift/rollout/multi_turn.py: MultiTurnScheduler.run with GYMScheduler's hooks; swift/rollout/gym_env.py;
examples/megatron/grpo/multi_turn/frozen_lake_plugin.py), written here from its behaviour as
shared/reference/gym-rollout-semantics.md states it, with the same per-turn work:

- per trajectory: a request with a uuid; `on_trajectory_start` creates the env by name from a registry
  dict, awaits `reset`, replaces the messages with [system, user(observation)], keeps the env and the
  running totals in dicts keyed by uuid;
- per turn: `await engine.infer_async(request)` returns a response object with one choice; the reply is
  appended as an assistant message; `on_turn_end` awaits `env.step(deepcopy(messages))`, adds the
  reward, copies the step rewards into a fresh rollout_infos dict, closes and forgets the env when done;
  the loop merges rollout_infos, asks `check_finished` (finish_reason 'length', max_turns), lets
  `done` override it, re-checks max_turns; otherwise `step` appends the pending observation;
- the batch: every trajectory is a coroutine gathered at once (ms-swift's `batch_run` is
  `asyncio.gather`), optionally under a semaphore of `--concurrency` (0 = no limit, as ms-swift);
- the output: GRPO group rewards and advantages ((r - mean) / (sample std + 1e-4)), one JSON line per
  trajectory (messages, rewards, advantage, rollout_infos with num_turns), a JSON summary on stdout.

It does the same work as `effect-gym run --gym-env frozen_lake --policy random --max-turns 10`: the
random policy is effect-gym's (src/inference/Scripted.ts: the move of turn t is
MOVES[mixSeed(mixSeed(trajectorySeed, t), 1) & 3], with effect-gym's seed derivation, src/internal/seed.ts
and src/Rollout.ts), and FrozenLake draws its maps with Python's own `random.Random`, so both programs
produce the same trajectories; `--check-against LOG` compares them with an effect-gym completions log.

    python3 gym_loop.py --dataset ROWS.jsonl --num-generations 8 --max-turns 10 --output LOG
        [--gym-env frozen_lake] [--concurrency 0] [--latency-ms 0] [--seed 0] [--check-against LOG]
        [--step-copy deep|shallow]
    python3 gym_loop.py --compare-logs OURS THEIRS
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import re
import sys
import time
import uuid as uuidlib
from copy import deepcopy
from typing import Any, Dict, List, Optional, Tuple

Messages = List[Dict[str, Any]]

# ---- effect-gym's seeds and random policy ---------------------------------------------------------

_M32 = 0xFFFFFFFF


def _fmix32(h: int) -> int:
    """murmur3's 32-bit finalizer (src/internal/seed.ts)."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    h ^= h >> 16
    return h


def mix_seed(seed: int, value: int) -> int:
    """effect-gym's mixSeed: a non-negative 31-bit seed from a seed and a value."""
    a = ((_fmix32(seed & _M32) ^ 0x9E3779B9) * 31) & _M32
    return _fmix32((a + (value & _M32)) & _M32) & 0x7FFFFFFF


MOVES = ('up', 'down', 'left', 'right')

# ---- the env contract and registry (gym_env.py) ---------------------------------------------------


class Env:
    """An environment created per trajectory from the row's env_config."""

    def __init__(self, env_config: Dict[str, Any]):
        self.env_config = env_config

    async def reset(self, request: 'RolloutInferRequest') -> Tuple[str, Dict[str, Any], str]:
        raise NotImplementedError

    async def step(self, action: Messages) -> Tuple[str, float, bool, Dict[str, Any]]:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


envs: Dict[str, type] = {}

# ---- FrozenLake (the plugin's behaviour, gym-rollout-semantics.md section 5) ----------------------


def _reachable(board: List[List[str]], size: int) -> bool:
    start = next(((r, c) for r in range(size) for c in range(size) if board[r][c] == 'S'), None)
    if start is None:
        return False
    todo = [start]
    seen = set()
    while todo:
        r, c = todo.pop()
        if (r, c) in seen:
            continue
        seen.add((r, c))
        for dr, dc in ((1, 0), (0, 1), (-1, 0), (0, -1)):
            nr, nc = r + dr, c + dc
            if 0 <= nr < size and 0 <= nc < size:
                if board[nr][nc] == 'G':
                    return True
                if board[nr][nc] != 'H':
                    todo.append((nr, nc))
    return False


def random_map(size: int, p: float, seed: Optional[int]) -> List[str]:
    rng = random.Random(seed)
    while True:
        board = [['F' if rng.random() < p else 'H' for _ in range(size)] for _ in range(size)]
        sr, sc = rng.randrange(size), rng.randrange(size)
        gr, gc = rng.randrange(size), rng.randrange(size)
        if (sr, sc) == (gr, gc):
            continue
        board[sr][sc] = 'S'
        board[gr][gc] = 'G'
        if _reachable(board, size):
            return [''.join(line) for line in board]


DELTAS = {'up': (-1, 0), 'down': (1, 0), 'left': (0, -1), 'right': (0, 1)}

SYSTEM_PROMPT = ('You are playing FrozenLake. You see a grid where:\n'
                 '  P = your current position, S = start, G = goal, H = hole, F = safe ice.\n'
                 'Move one cell per turn. Reach G to win (+1 reward). Stepping into H ends '
                 'the episode with 0 reward. Moves that would go off the grid leave you in '
                 'place.\n\n'
                 'On every turn, output your move inside <action>...</action>. '
                 'The action must be exactly one of: up, down, left, right.\n\n'
                 'Example: <action>down</action>')

_TAGGED = re.compile(r'<action>\s*(up|down|left|right)\s*</action>', re.IGNORECASE)
_BARE = re.compile(r'\b(up|down|left|right)\b', re.IGNORECASE)


def render(grid: List[str], row: int, col: int) -> str:
    lines = []
    for r, line in enumerate(grid):
        if r == row:
            cells = list(line)
            cells[col] = '*' if cells[col] == 'G' else 'P'
            lines.append(' '.join(cells))
        else:
            lines.append(' '.join(line))
    return '\n'.join(lines)


def parse_move(text: str) -> Optional[str]:
    m = _TAGGED.search(text)
    if m:
        return m.group(1).lower()
    bare = _BARE.findall(text)
    return bare[-1].lower() if bare else None


class FrozenLakeEnv(Env):

    def __init__(self, env_config: Dict[str, Any]):
        super().__init__(env_config)
        self.size = int(env_config.get('size', 4))
        self.p = float(env_config.get('p', 0.8))
        seed = env_config.get('seed')
        self.seed = int(seed) if seed is not None else None
        self.grid: List[str] = []
        self.row = 0
        self.col = 0
        self.steps = 0

    async def reset(self, request: 'RolloutInferRequest') -> Tuple[str, Dict[str, Any], str]:
        self.grid = random_map(self.size, self.p, self.seed)
        for r, line in enumerate(self.grid):
            if 'S' in line:
                self.row, self.col = r, line.index('S')
                break
        self.steps = 0
        observation = (f'FrozenLake {self.size}x{self.size}:\n{render(self.grid, self.row, self.col)}\n\n'
                       f'You are at row {self.row}, col {self.col}. Output your first move.')
        return observation, {'seed': self.seed, 'size': self.size}, SYSTEM_PROMPT

    async def step(self, action: Messages) -> Tuple[str, float, bool, Dict[str, Any]]:
        move = parse_move(action[-1].get('content', '') if action else '')
        self.steps += 1
        info: Dict[str, Any] = {'seed': self.seed, 'step': self.steps, 'parsed_action': move}
        if move is None:
            return (f'Invalid response: could not find a move. Reply with <action>up|down|left|right</action>.'
                    f'\n\n{render(self.grid, self.row, self.col)}', 0.0, False, {**info, 'status': 'invalid_action'})
        dr, dc = DELTAS[move]
        self.row = max(0, min(len(self.grid) - 1, self.row + dr))
        self.col = max(0, min(len(self.grid[0]) - 1, self.col + dc))
        cell = self.grid[self.row][self.col]
        board = render(self.grid, self.row, self.col)
        if cell == 'G':
            return f'You moved {move} and reached the goal!\n{board}', 1.0, True, {**info, 'status': 'goal'}
        if cell == 'H':
            return (f'You moved {move} and fell into a hole. Episode over.\n{board}', 0.0, True,
                    {**info, 'status': 'hole'})
        return (f'You moved {move}. Now at row {self.row}, col {self.col} (step {self.steps}).\n{board}\n'
                f'Output your next move.', 0.0, False, {**info, 'status': 'ok'})

    async def close(self) -> None:
        pass


envs['frozen_lake'] = FrozenLakeEnv

# ---- requests, responses and the inference engine (the random policy) ------------------------------


class RolloutInferRequest:
    __slots__ = ('messages', 'data_dict', 'uuid', 'seed')

    def __init__(self, messages: Messages, data_dict: Dict[str, Any], uuid: str, seed: int):
        self.messages = messages
        self.data_dict = data_dict
        self.uuid = uuid
        self.seed = seed


class ChatMessage:
    __slots__ = ('role', 'content')

    def __init__(self, role: str, content: str):
        self.role = role
        self.content = content


class Choice:
    __slots__ = ('index', 'message', 'finish_reason', 'token_ids', 'logprobs')

    def __init__(self, message: ChatMessage, finish_reason: str):
        self.index = 0
        self.message = message
        self.finish_reason = finish_reason
        self.token_ids = None
        self.logprobs = None


class ChatCompletionResponse:
    __slots__ = ('id', 'model', 'choices', 'created')

    def __init__(self, choices: List[Choice]):
        self.id = 'chatcmpl-random'
        self.model = 'random'
        self.choices = choices
        self.created = 0


class RandomPolicyEngine:
    """effect-gym's `random` policy as an inference engine: turn t's move comes from the trajectory's
    seed and t; an optional fixed latency per call (an asyncio sleep, as a remote model waits)."""

    def __init__(self, latency_ms: float):
        self.latency = latency_ms / 1000

    async def infer_async(self, request: RolloutInferRequest, turn: int) -> ChatCompletionResponse:
        if self.latency > 0:
            await asyncio.sleep(self.latency)
        move = MOVES[mix_seed(mix_seed(request.seed, turn), 1) & 3]
        return ChatCompletionResponse([Choice(ChatMessage('assistant', f'<action>{move}</action>'), 'stop')])


class RolloutOutput:
    __slots__ = ('response', 'messages', 'response_token_ids', 'response_loss_mask', 'rollout_infos',
                 'rollout_logprobs')

    def __init__(self, response, messages, response_token_ids, response_loss_mask, rollout_infos, rollout_logprobs):
        self.response = response
        self.messages = messages
        self.response_token_ids = response_token_ids
        self.response_loss_mask = response_loss_mask
        self.rollout_infos = rollout_infos
        self.rollout_logprobs = rollout_logprobs

# ---- the scheduler: the multi-turn loop and the gym hooks ------------------------------------------


def drop_trailing_reply(messages: Messages) -> None:
    if messages and messages[-1]['role'] == 'assistant':
        messages.pop()


class GymScheduler:

    def __init__(self, engine: RandomPolicyEngine, max_turns: int, gym_env: Optional[str], step_copy: str = 'deep'):
        self.engine = engine
        self.copy = deepcopy if step_copy == 'deep' else list
        self.max_turns = max_turns
        self.gym_env = gym_env
        self._envs: Dict[str, Env] = {}
        self._total_rewards: Dict[str, float] = {}
        self._step_rewards: Dict[str, List[float]] = {}
        self._pending_obs: Dict[str, Optional[str]] = {}

    # -- the hooks
    async def _forget(self, uuid: str) -> None:
        env = self._envs.pop(uuid, None)
        if env is not None:
            try:
                await env.close()
            except Exception:
                pass
        self._total_rewards.pop(uuid, None)
        self._step_rewards.pop(uuid, None)
        self._pending_obs.pop(uuid, None)

    def _create_env(self, env_config: Dict[str, Any]) -> Env:
        name = env_config.get('name', self.gym_env)
        if name not in envs:
            raise ValueError(f"Environment '{name}' not found. Available: {list(envs)}")
        return envs[name](env_config)

    async def on_trajectory_start(self, requests: List[RolloutInferRequest]) -> None:

        async def start(request: RolloutInferRequest) -> None:
            if request.uuid in self._envs:
                await self._forget(request.uuid)
            env = self._create_env((request.data_dict or {}).get('env_config', {}))
            observation, _info, system = await env.reset(request)
            messages: Messages = [{'role': 'system', 'content': system}] if system else []
            messages.append({'role': 'user', 'content': observation})
            request.messages = messages
            self._envs[request.uuid] = env
            self._total_rewards[request.uuid] = 0.0
            self._step_rewards[request.uuid] = []
            self._pending_obs[request.uuid] = None

        await asyncio.gather(*[start(r) for r in requests])

    async def on_turn_end(self, request: RolloutInferRequest, choice: Choice, turn: int) -> Dict[str, Any]:
        uuid = request.uuid
        env = self._envs.get(uuid)
        if env is None:
            return {'done': True, 'rollout_infos': {}}
        observation, reward, done, _info = await env.step(self.copy(request.messages))
        self._total_rewards[uuid] = self._total_rewards.get(uuid, 0.0) + float(reward)
        self._step_rewards.setdefault(uuid, []).append(float(reward))
        self._pending_obs[uuid] = None if done else observation
        infos = {'total_reward': self._total_rewards[uuid], 'step_rewards': list(self._step_rewards[uuid]),
                 'gym_done': done}
        if done:
            await self._forget(uuid)
        return {'done': done, 'rollout_infos': infos}

    def check_finished(self, request: RolloutInferRequest, choice: Choice, turn: int) -> bool:
        return choice.finish_reason == 'length' or bool(self.max_turns and turn >= self.max_turns)

    def step(self, request: RolloutInferRequest, choice: Choice, turn: int) -> Dict[str, Any]:
        observation = self._pending_obs.get(request.uuid)
        if observation is not None:
            request.messages.append({'role': 'user', 'content': observation})
            self._pending_obs[request.uuid] = None
        return {'infer_request': request}

    # -- the loop
    async def run(self, request: RolloutInferRequest) -> RolloutOutput:
        await self.on_trajectory_start([request])
        turn = 1
        infos: Dict[str, Any] = {}
        token_ids: List[List[int]] = []
        loss_mask: List[List[int]] = []
        logprobs: List[List[float]] = []
        while True:
            messages = request.messages
            if turn == 1:
                drop_trailing_reply(messages)
            response = await self.engine.infer_async(request, turn)
            choice = response.choices[0]
            if turn > 1 and not messages[-1]['content']:
                drop_trailing_reply(messages)
            reply = choice.message.content
            continuation = messages[-1]['role'] == 'assistant'
            if continuation:
                messages[-1]['content'] += reply
            else:
                messages.append({'role': 'assistant', 'content': reply})
            result = await self.on_turn_end(request, choice, turn)
            if result.get('rollout_infos'):
                infos.update(result['rollout_infos'])
            stop = self.check_finished(request, choice, turn)
            if 'done' in result:
                stop = result['done']
            if self.max_turns:
                stop = stop or turn >= self.max_turns
            if stop:
                final_ids = choice.token_ids
                if continuation and token_ids:
                    token_ids[-1].extend(final_ids or [])
                elif not token_ids and final_ids:
                    token_ids = [list(final_ids)]
                    loss_mask = [[1] * len(final_ids)]
                return RolloutOutput(response, messages, token_ids, loss_mask, {**infos, 'num_turns': turn},
                                     logprobs)
            out = self.step(request, choice, turn)
            request = out['infer_request']
            if 'rollout_infos' in out:
                infos.update(out['rollout_infos'])
            if choice.logprobs:
                logprobs.append([item['logprob'] for item in choice.logprobs['content']])
            turn += 1

# ---- the job: dataset in, completions log out -------------------------------------------------------


def advantages(rewards: List[float], eps: float = 1e-4) -> List[float]:
    n = len(rewards)
    if n < 2:
        return [0.0] * n
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1))
    return [(r - mean) / (std + eps) for r in rewards]


async def job(args: argparse.Namespace) -> Dict[str, Any]:
    started = time.perf_counter()
    rows = []
    with open(args.dataset, encoding='utf-8') as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
    scheduler = GymScheduler(RandomPolicyEngine(args.latency_ms), args.max_turns, args.gym_env, args.step_copy)
    gate = asyncio.Semaphore(args.concurrency) if args.concurrency > 0 else None

    async def one(request: RolloutInferRequest) -> RolloutOutput:
        if gate is None:
            return await scheduler.run(request)
        async with gate:
            return await scheduler.run(request)

    requests = []
    for index, row in enumerate(rows):
        row_seed = mix_seed(args.seed, index)
        data_dict = {k: v for k, v in row.items() if k != 'messages'}
        for generation in range(args.num_generations):
            requests.append(RolloutInferRequest(deepcopy(row.get('messages', [])), data_dict,
                                                str(uuidlib.uuid4()), mix_seed(row_seed, 0x10000 + generation)))
    outputs = await asyncio.gather(*[one(r) for r in requests])
    turns = 0
    successes = 0
    g = args.num_generations
    with open(args.output, 'w', encoding='utf-8') as out:
        for index in range(len(rows)):
            group = outputs[index * g:(index + 1) * g]
            rewards = [float(o.rollout_infos.get('total_reward', 0.0)) for o in group]
            for generation, (o, reward, advantage) in enumerate(zip(group, rewards, advantages(rewards))):
                turns += o.rollout_infos['num_turns']
                successes += reward > 0
                out.write(json.dumps({'row': index, 'generation': generation, 'messages': o.messages,
                                      'rewards': {'gym_reward': reward}, 'reward': reward, 'advantage': advantage,
                                      'rollout_infos': o.rollout_infos}) + '\n')
    seconds = time.perf_counter() - started
    trajectories = len(outputs)
    return {'trajectories': trajectories, 'turns': turns, 'successes': successes,
            'mean_turns': turns / trajectories if trajectories else 0, 'seconds': seconds,
            'turns_per_second': turns / seconds, 'trajectories_per_second': trajectories / seconds}


def check_against(ours: str, theirs: str) -> int:
    """Compares two completions logs trajectory by trajectory (row, generation): the conversation, the
    rewards and the number of turns. Returns the number matched; raises on the first difference."""

    def load(path: str) -> Dict[Tuple[int, int], Dict[str, Any]]:
        with open(path, encoding='utf-8') as f:
            return {(t['row'], t['generation']): t for t in map(json.loads, f) if t}

    a, b = load(ours), load(theirs)
    if set(a) != set(b):
        raise SystemExit(f'the logs hold different trajectories: {len(a)} here, {len(b)} there')
    for key in sorted(a):
        x, y = a[key], b[key]
        for field in ('messages', 'reward'):
            if x[field] != y[field]:
                raise SystemExit(f'trajectory row {key[0]} generation {key[1]}: {field} differs')
        for field in ('total_reward', 'step_rewards', 'num_turns', 'gym_done'):
            if x['rollout_infos'].get(field) != y['rollout_infos'].get(field):
                raise SystemExit(f'trajectory row {key[0]} generation {key[1]}: rollout_infos.{field} differs')
        if abs(x['advantage'] - y['advantage']) > 1e-9:
            raise SystemExit(f'trajectory row {key[0]} generation {key[1]}: advantage differs')
    return len(a)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--dataset')
    parser.add_argument('--output')
    parser.add_argument('--gym-env', default='frozen_lake')
    parser.add_argument('--num-generations', type=int, default=8)
    parser.add_argument('--max-turns', type=int, default=10)
    parser.add_argument('--concurrency', type=int, default=0, help='trajectories in flight; 0: all (ms-swift)')
    parser.add_argument('--latency-ms', type=float, default=0.0)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--step-copy', choices=('deep', 'shallow'), default='deep',
                        help="what env.step gets: a deepcopy of the messages (ms-swift) or a list copy (not ms-swift: "
                             "a reference for what the loop costs without the deepcopy)")
    parser.add_argument('--check-against', help='an effect-gym completions log of the same run')
    parser.add_argument('--compare-logs', nargs=2, metavar=('OURS', 'THEIRS'),
                        help='run nothing: compare two completions logs, print the number matched')
    args = parser.parse_args()
    if args.compare_logs:
        sys.stdout.write(json.dumps({'matched': check_against(*args.compare_logs)}) + '\n')
        return
    if not args.dataset or not args.output:
        parser.error('--dataset and --output are required')
    summary = asyncio.run(job(args))
    if args.check_against:
        summary['matched'] = check_against(args.output, args.check_against)
    if args.latency_ms > 0 and args.concurrency > 0:
        summary['efficiency'] = summary['turns_per_second'] / (args.concurrency / (args.latency_ms / 1000))
    sys.stdout.write(json.dumps(summary) + '\n')


if __name__ == '__main__':
    main()
