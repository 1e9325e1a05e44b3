"""
OpenEnv's own Python server and client for the echo workload (bench/workloads/openenv_python.ts).

--role server: an echo-like env served by OpenEnv's `create_app` under uvicorn (one worker, as a
    user starts it), the action `{"message": str}` (TextArena's shape), the observation in the
    shape effect-gym's server sends for a text env (prompt, messages, current_player_id,
    legal_players, info), so both servers send frames of about the same size. Prints
    `listening PORT` when it accepts connections.
--role client: OpenEnv's `EnvClient` (the async WebSocket client), `--sessions` sessions stepping
    back to back in one asyncio loop (a closed loop), each resetting every `--reset-every` steps.
    Steps completed within the measured window are counted; prints `window open` and `window
    closed` as the window starts and ends (the caller samples the server's CPU time then), and
    the figures as one JSON line.

Needs openenv-core (pip install --no-deps the repository's source; its core dependencies: fastapi,
uvicorn, pydantic, websockets, requests).
"""

import argparse
import asyncio
import json
import socket
import sys
import time
from typing import Any, Dict, List, Optional


def serve(port: int, max_sessions: int) -> None:
    import uvicorn
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, Observation, State

    class MessageAction(Action):
        message: str

    class EchoObservation(Observation):
        prompt: str = ""
        messages: List[Dict[str, Any]] = []
        current_player_id: int = 0
        legal_players: List[int] = [0]
        info: Dict[str, Any] = {}

    class Echo(Environment):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self) -> None:
            super().__init__()
            self._state = State(episode_id=None, step_count=0)

        def _observe(self, text: str, reward: float) -> EchoObservation:
            return EchoObservation(
                prompt=text,
                messages=[{"sender_id": -1, "content": text, "category": "MESSAGE"}],
                info={"step": self._state.step_count},
                reward=reward,
                done=False,
            )

        def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any) -> EchoObservation:
            self._state = State(episode_id=episode_id, step_count=0)
            return self._observe("say something", 0.0)

        def step(self, action: MessageAction, timeout_s: Optional[float] = None, **kwargs: Any) -> EchoObservation:
            self._state.step_count += 1
            return self._observe(f"heard: {action.message}", 0.0)

        @property
        def state(self) -> State:
            return self._state

    app = create_app(Echo, MessageAction, EchoObservation, env_name="echo", max_concurrent_envs=max_sessions)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    print(f"listening {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning", ws_max_size=16 * 1024 * 1024)
    uvicorn.Server(config).run(sockets=[sock])


async def drive(url: str, sessions: int, warmup: float, seconds: float, reset_every: int) -> Dict[str, Any]:
    from openenv.core.client_types import StepResult
    from openenv.core.env_client import EnvClient

    class EchoClient(EnvClient):
        def _step_payload(self, action: Dict[str, Any]) -> Dict[str, Any]:
            return action

        def _parse_result(self, payload: Dict[str, Any]) -> StepResult:
            return StepResult(observation=payload.get("observation"), reward=payload.get("reward"), done=payload.get("done", False))

        def _parse_state(self, payload: Dict[str, Any]) -> Dict[str, Any]:
            return payload

    counting = False
    stop = False
    counted = 0
    errors: List[str] = []
    action = {"message": "I am not sure what to do here."}

    async def session(index: int) -> None:
        nonlocal counted
        client = EchoClient(base_url=url)
        try:
            await client.connect()
            await client.reset(seed=index, episode_id=f"bench-{index}")
            steps = 0
            while not stop:
                steps += 1
                if steps % reset_every == 0:
                    await client.reset(seed=index)
                    continue
                await client.step(action)
                if counting:
                    counted += 1
        except Exception as e:  # a failed session is reported, not hidden
            errors.append(f"{type(e).__name__}: {e}")
        finally:
            await client.close()

    tasks = [asyncio.create_task(session(i)) for i in range(sessions)]
    await asyncio.sleep(warmup)
    counting = True
    print("window open", flush=True)
    started = time.perf_counter()
    cpu = time.process_time()
    await asyncio.sleep(seconds)
    counting = False
    print("window closed", flush=True)
    elapsed = time.perf_counter() - started
    client_cpu = time.process_time() - cpu
    steps = counted
    stop = True
    await asyncio.gather(*tasks)
    return {
        "sessions": sessions,
        "steps": steps,
        "seconds": elapsed,
        "stepsPerSecond": steps / elapsed,
        "clientCpuUsPerStep": client_cpu * 1e6 / max(1, steps),
        "errors": errors[:5],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", choices=["server", "client"], required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--max-sessions", type=int, default=64)
    parser.add_argument("--url", default="")
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--reset-every", type=int, default=100)
    args = parser.parse_args()
    if args.role == "server":
        serve(args.port, args.max_sessions)
    else:
        out = asyncio.run(drive(args.url, args.sessions, args.warmup, args.seconds, args.reset_every))
        print(json.dumps(out), flush=True)
        sys.exit(1 if out["errors"] else 0)


if __name__ == "__main__":
    main()
