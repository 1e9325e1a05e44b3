"""TRL's GRPOTrainer trained on effect-gym's FrozenLake, on CPU, with a tiny model built at run time.

    python examples/trl_grpo.py            # 4 steps, 2 maps of 3x3 per step, 4 episodes per map

What runs (all on this machine, no network, no download):

1. A tiny Qwen3 (2 layers, hidden size 64) with a byte-level BPE tokenizer trained here on a few lines
   of FrozenLake text (a few hundred tokens, so that the logits of a training step fit a CPU). The
   model starts with a prior that favours the four moves and the end of turn (see ``build_model``),
   so that an untrained policy already plays: rewards vary within a group, which GRPO needs.
2. A model server in this process (``ModelServer``): vLLM's ``/v1/models`` and ``/v1/completions``
   with a token-id prompt, ``return_token_ids`` and ``logprobs``, sampling from the very model object
   the trainer updates. That is the "trainer syncs the weights itself" topology of docs/trainers.md:
   here the sync is free (one process, one set of weights), and after each optimizer step the script
   says so with ``POST /v1/policy-version``.
3. ``effect-gym serve --mode server --token-path require`` in front of it, with this tokenizer
   (``--tokenizer``): effect-gym plays each FrozenLake episode (the env's observations between turns)
   token in, token out, and streams the trajectories over ``POST /v1/rollouts``.
4. ``GRPOTrainer(rollout_func=make_rollout_func(...))`` from ``clients/python/effect_gym.py``: each
   step's prompts become FrozenLake rows; ``prompt_ids``, ``completion_ids``, ``logprobs`` and
   ``env_mask`` come from effect-gym's token sequences, the reward is the env's (``env_reward``).

Needs torch, transformers, trl, datasets (``.ci/trl-example`` installs them) and a built effect-gym
(``npm ci``). Prints one line per step and a summary; exits 0 when every step took an optimizer step
with a finite loss, the sampled logprobs match the trainer's own, and each step's trajectories were
sampled with that step's weights.
"""

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "clients", "python"))

def at_least(low):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise argparse.ArgumentTypeError("must be an integer >= %d, got %s" % (low, text))
        return value

    return parse


def positive_float(text):
    try:
        value = float(text)
    except ValueError:
        value = None
    # (nan and inf parse as floats: a learning rate of either trains nothing a trainer could use)
    if value is None or not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError("must be a finite number > 0, got %s" % text)
    return value


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=at_least(1), default=4, help="optimizer steps (default 4)")
    parser.add_argument("--num-generations", type=at_least(2), default=4, help="trajectories per prompt, the GRPO group (default 4)")
    parser.add_argument("--prompts-per-step", type=at_least(1), default=2, help="FrozenLake maps per step (default 2)")
    parser.add_argument("--size", type=at_least(2), default=3, help="the FrozenLake map's side (default 3)")
    parser.add_argument("--max-turns", type=at_least(1), default=6, help="turns per episode (default 6)")
    parser.add_argument("--max-tokens", type=at_least(1), default=8, help="tokens per reply (default 8)")
    parser.add_argument("--learning-rate", type=positive_float, default=1e-2, help="AdamW's learning rate (default 1e-2)")
    parser.add_argument("--seed", type=int, default=0, help="the seed of the model, the maps' order and the sampling (default 0)")
    parser.add_argument("--effect-gym", default="node bin/effect-gym.js", help="how to run effect-gym, from the repository root")
    return parser.parse_args()


if __name__ == "__main__":
    parse_args()  # --help and bad options answer before the imports below, which need torch and trl

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL 1.13
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded: the model and tokenizer are built here
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

try:
    import torch  # noqa: E402
    from datasets import Dataset  # noqa: E402
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM, TrainerCallback  # noqa: E402
    from trl import GRPOConfig, GRPOTrainer  # noqa: E402
except ImportError as e:
    sys.stderr.write("trl_grpo.py: %s: it needs torch, transformers, trl and datasets "
                     "(bash .ci/trl-example installs them in .venv-trl; then .venv-trl/bin/python examples/trl_grpo.py)\n" % e)
    sys.exit(2)

from effect_gym import Client, make_rollout_func  # noqa: E402

MOVES = ["up", "down", "left", "right"]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# ChatML, as Qwen's templates render a conversation without tools.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
# Lines like FrozenLake's own text, for the BPE merges: they only make the common words one token each
# (anything else is still encoded, byte by byte).
CORPUS = [
    "You are playing FrozenLake. You see a grid where:",
    "P = your current position, S = start, G = goal, H = hole, F = safe ice.",
    "Move one cell per turn. Reach G to win (+1 reward). Stepping into H ends the episode with 0 reward.",
    "Moves that would go off the grid leave you in place.",
    "On every turn, output your move inside <action>...</action>. The action must be exactly one of: up, down, left, right.",
    "Example: <action>down</action>",
    "FrozenLake 4x4: You are at row 0, col 0. Output your first move. Output your next move.",
    "You moved down. Now at row 1, col 0 (step 1). You moved right and reached the goal!",
    "You moved left and fell into a hole. Episode over. Invalid response: could not find a move.",
    "Reply with <action>up|down|left|right</action>. SFFF FHFH FFFH HFFG PFFF",
] + [" ".join([" " + m for m in MOVES])] * 20


def build_tokenizer(folder):
    """A byte-level BPE (Qwen's kind) trained on ``CORPUS``, saved as a Hugging Face folder for effect-gym's
    ``--tokenizer`` and returned as the trainer's ``processing_class``."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    bpe.train_from_iterator(CORPUS, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    for move in MOVES:
        if len(tokenizer.encode(" " + move, add_special_tokens=False)) != 1:
            raise SystemExit("the tokenizer did not make %r one token" % (" " + move))
    return tokenizer


def build_model(tokenizer, seed):
    """A 2-layer Qwen3 with random weights and a prior: dimension 0 of every token embedding is a large
    constant, so the final norm's output keeps it, and column 0 of ``lm_head`` turns it into a bias
    that favours " up", " down", " left", " right" and the end of turn. Every weight stays trainable."""
    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen3ForCausalLM(config)
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 4.0
        bias = torch.zeros(len(tokenizer))
        for move in MOVES:
            bias[tokenizer.convert_tokens_to_ids(tokenizer.tokenize(" " + move))[0]] = 5.0
        bias[tokenizer.eos_token_id] = 4.5
        # The normed hidden state's dimension 0 is about sqrt(hidden_size) when the constant dominates.
        model.lm_head.weight[:, 0] = bias / math.sqrt(config.hidden_size)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


class ModelServer:
    """vLLM's token-level routes over ``model``, on loopback: ``GET /v1/models`` (with ``max_model_len``)
    and ``POST /v1/completions`` with a token-id ``prompt``, answering the sampled ``token_ids`` (the end
    of turn included, as vLLM does) and each one's ``logprobs``. One call at a time (a lock): the model
    is tiny, and the trainer waits for its rollouts anyway."""

    def __init__(self, model, tokenizer, name="tiny-qwen3", max_model_len=4096):
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.max_model_len = max_model_len
        self.stop_ids = {tokenizer.eos_token_id, tokenizer.pad_token_id}
        self.lock = threading.Lock()
        self.calls = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status, value):
                data = json.dumps(value).encode("utf-8")
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the caller gave up (effect-gym cut its trajectory): nobody to answer

            def do_GET(self):
                if self.path == "/v1/models":
                    model = {"id": server.name, "object": "model", "max_model_len": server.max_model_len}
                    return self._send(200, {"object": "list", "data": [model]})
                self._send(404, {"error": {"message": "not found: %s" % self.path}})

            def do_POST(self):
                if self.path != "/v1/completions":
                    return self._send(404, {"error": {"message": "not found: %s" % self.path}})
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                except ValueError:
                    return self._send(400, {"error": {"message": "the body is not JSON"}})
                prompt = body.get("prompt") if isinstance(body, dict) else None
                vocabulary = len(server.tokenizer)
                if not (isinstance(prompt, list) and prompt and all(isinstance(i, int) and 0 <= i < vocabulary for i in prompt)):
                    return self._send(400, {"error": {"message": "prompt must be a list of token ids below %d" % vocabulary}})
                if len(prompt) >= server.max_model_len:
                    return self._send(400, {"error": {"message": "the prompt fills max_model_len (%d)" % server.max_model_len}})
                try:
                    answer = server.complete(body, prompt)
                except (TypeError, ValueError) as e:  # max_tokens, temperature or seed of the wrong type or range
                    return self._send(400, {"error": {"message": str(e)}})
                self._send(200, answer)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d/v1" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def complete(self, body, prompt):
        # At most what fits in the context, as vLLM's max_model_len bounds it.
        max_tokens = max(1, min(int(body.get("max_tokens") or 16), self.max_model_len - len(prompt)))
        temperature = float(body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0)
        if not temperature >= 0:
            raise ValueError("temperature must be >= 0, got %r" % body.get("temperature"))
        generator = torch.Generator()
        generator.manual_seed(int(body["seed"]) if body.get("seed") is not None else torch.seed() % 2**63)
        ids, logprobs, finish = [], [], "length"
        with self.lock, torch.no_grad():
            self.calls += 1
            for _ in range(max_tokens):
                # The whole sequence each time (no KV cache): the same forward pass the trainer scores with.
                logits = self.model(input_ids=torch.tensor([prompt + ids])).logits[0, -1].float()
                if temperature == 0:
                    token = int(torch.argmax(logits))
                    logprob = float(torch.log_softmax(logits, -1)[token])
                else:
                    logps = torch.log_softmax(logits / temperature, -1)
                    token = int(torch.multinomial(logps.exp(), 1, generator=generator))
                    logprob = float(logps[token])
                ids.append(token)
                logprobs.append(logprob)
                if token in self.stop_ids:
                    finish = "stop"
                    break
        choice = {
            "index": 0,
            # The reply's text without its end of turn, as vLLM answers: effect-gym hands it to the env.
            "text": self.tokenizer.decode([i for i in ids if i not in self.stop_ids]),
            "finish_reason": finish,
            "token_ids": ids,
            "prompt_token_ids": prompt,
            "logprobs": {"tokens": ["token_id:%d" % i for i in ids], "token_logprobs": logprobs},
        }
        usage = {"prompt_tokens": len(prompt), "completion_tokens": len(ids), "total_tokens": len(prompt) + len(ids)}
        return {"id": "cmpl-%d" % self.calls, "object": "text_completion", "model": self.name, "choices": [choice], "usage": usage}

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def start_effect_gym(args, model_url, tokenizer_dir):
    """``effect-gym serve`` on a free port, in front of the model server; returns (process, its URL)."""
    command = args.effect_gym.split() + [
        "serve", "--port", "0", "--env", "frozen_lake",
        "--mode", "server", "--base-url", model_url, "--model", "tiny-qwen3",
        "--tokenizer", tokenizer_dir, "--token-path", "require", "--seeded-sampling",
        "--temperature", "1", "--max-tokens", str(args.max_tokens), "--max-turns", str(args.max_turns),
    ]
    print("effect-gym: %s" % " ".join(command), flush=True)
    process = subprocess.Popen(command, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    # Its stderr goes on to ours, read by a thread so that it never blocks on a full pipe.
    threading.Thread(target=lambda: [sys.stderr.write("effect-gym: " + l) for l in process.stderr], daemon=True).start()
    found = []

    def read_url():  # serve says "rollout server: http://127.0.0.1:PORT (...)" on stdout once it listens
        for line in process.stdout:
            if not found and line.startswith("rollout server: http://"):
                found.append(line.split()[2])

    reader = threading.Thread(target=read_url, daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    try:
        while not found:
            if process.poll() is not None:
                raise SystemExit("effect-gym serve exited with %s before it listened (its messages are above)" % process.returncode)
            if time.monotonic() > deadline:
                raise SystemExit("effect-gym serve did not listen within 120 s")
            time.sleep(0.05)
    except BaseException:  # SIGTERM or Ctrl-C while it starts: the caller has no process to stop yet
        stop(process)
        raise
    return process, found[0]


class StepLog(TrainerCallback):
    """Says each optimizer step to effect-gym (``POST /v1/policy-version``: the model server samples with
    the trainer's own weights, so they are synced the moment the step ends) and keeps TRL's logs."""

    def __init__(self, client):
        self.client = client
        self.logs = []

    def on_step_end(self, args, state, control, **kwargs):
        self.client.set_policy_version(state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.logs.append(dict(logs, step=state.global_step))
            print(
                "step %d: loss %.4f  reward %.3f (std %.3f)  grad_norm %.4f  completion tokens %.1f  clipped %.2f"
                % (state.global_step, logs["loss"], logs.get("reward", float("nan")), logs.get("reward_std", float("nan")),
                   logs.get("grad_norm", float("nan")), logs.get("completions/mean_length", float("nan")),
                   logs.get("completions/clipped_ratio", float("nan"))),
                flush=True,
            )


def main():
    args = parse_args()
    started = time.monotonic()
    # SIGTERM (a CI timeout, kill) ends the run as Ctrl-C does: through the finally below, which stops
    # effect-gym serve (else it would outlive this process) and removes the temporary folder.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    # One thread: the model is tiny, and on a busy 2-core machine two threads made a call 25 times slower.
    torch.set_num_threads(1)

    work = tempfile.mkdtemp(prefix="trl-grpo-")
    process, model_server = None, None
    # Everything from here on inside the try: a SIGTERM or Ctrl-C while effect-gym serve starts (up to
    # 120 s) or a failed first call still stops it and removes the folder.
    try:
        tokenizer_dir = os.path.join(work, "tokenizer")
        tokenizer = build_tokenizer(tokenizer_dir)
        model = build_model(tokenizer, args.seed)
        print("model: Qwen3, %d parameters, vocabulary %d (built here)" % (sum(p.numel() for p in model.parameters()), len(tokenizer)))
        before = {name: p.detach().clone() for name, p in model.named_parameters()}

        model_server = ModelServer(model, tokenizer)
        process, url = start_effect_gym(args, model_server.url, tokenizer_dir)
        client = Client(url)
        client.set_policy_version(0)
        maps = args.steps * args.prompts_per_step
        seeds = {"FrozenLake map %d" % s: s for s in range(maps)}
        dataset = Dataset.from_dict({"prompt": list(seeds)})
        inner = make_rollout_func(client, row=lambda prompt, i: {"env_config": {"seed": seeds[prompt], "size": args.size}}, seed=args.seed)
        batches = []

        def rollout_func(prompts, trainer):
            out = inner(prompts, trainer)
            drift = logprob_drift(model, out)
            batches.append({"prompts": len(prompts), "step": trainer.state.global_step, "drift": drift, **out})
            return out

        def env_reward(completions, env_reward, **kwargs):
            return [float(r) for r in env_reward]

        config = GRPOConfig(
            output_dir=os.path.join(work, "out"),
            max_steps=args.steps,
            per_device_train_batch_size=args.prompts_per_step * args.num_generations,
            num_generations=args.num_generations,
            learning_rate=args.learning_rate,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            use_cpu=True,
            bf16=False,
            seed=args.seed,
            disable_tqdm=True,
            mask_truncated_completions=False,
        )
        log = StepLog(client)
        trainer = GRPOTrainer(
            model=model, reward_funcs=[env_reward], args=config, train_dataset=dataset,
            processing_class=tokenizer, rollout_func=rollout_func, callbacks=[log],
        )
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)  # StepLog prints one line per step instead of TRL's dicts
        trainer.train()
        return summarize(args, model, before, batches, log, started, model_server)
    finally:
        if process is not None:
            stop(process)
        if model_server is not None:
            model_server.close()
        shutil.rmtree(work, ignore_errors=True)


def stop(process):
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()


def logprob_drift(model, out):
    """The largest gap between a sampled token's logprob as the model server reported it and the same
    model's logprob of that token at its place in the trajectory's one sequence (prompt_ids, then
    completion_ids). Near 0 only if every turn's prompt was exactly the sequence so far: what effect-gym
    sent is what the trainer scores."""
    worst = 0.0
    with torch.no_grad():
        for prompt, completion, logprobs, mask in zip(out["prompt_ids"], out["completion_ids"], out["logprobs"], out["env_mask"]):
            ids = torch.tensor([prompt + completion])
            logps = torch.log_softmax(model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float(), -1)
            own = logps.gather(1, torch.tensor(completion)[:, None])[:, 0]
            for i, on in enumerate(mask):
                if on:
                    worst = max(worst, abs(float(own[i]) - logprobs[i]))
    return worst


def summarize(args, model, before, batches, log, started, model_server):
    """Prints what happened and checks it: steps, losses, rewards, weights changed, on-policy samples."""
    changed = max(float((p.detach() - before[name]).abs().max()) for name, p in model.named_parameters())
    trajectories = sum(len(b["env_reward"]) for b in batches)
    rewards = [r for b in batches for r in b["env_reward"]]
    turns = [t for b in batches for t in b["num_turns"]]
    stale = [(b["step"], v) for b in batches for v in b["policy_version"] if v != b["step"]]
    model_tokens = sum(sum(m) for b in batches for m in b["env_mask"])
    env_tokens = sum(len(m) - sum(m) for b in batches for m in b["env_mask"])
    print("summary: %d optimizer steps, %d rollout calls, %d trajectories (%d per call, as TRL handed prompts)"
          % (len(log.logs), len(batches), trajectories, batches[0]["prompts"] if batches else 0))
    print("  loss per step: %s" % ", ".join("%.4f" % l["loss"] for l in log.logs))
    print("  mean env reward per step: %s" % ", ".join("%.3f" % l.get("reward", float("nan")) for l in log.logs))
    print("  episodes won: %d of %d; turns per episode: mean %.2f" % (sum(1 for r in rewards if r > 0), len(rewards), sum(turns) / max(1, len(turns))))
    print("  tokens: %d sampled by the model (trained on), %d from the env (masked)" % (model_tokens, env_tokens))
    drift = max(b["drift"] for b in batches) if batches else float("nan")
    print("  sampled logprobs vs the trainer's model on the same sequence: largest gap %.2g nats" % drift)
    print("  model server calls: %d; largest weight change: %.3g; %.1f s" % (model_server.calls, changed, time.monotonic() - started))
    problems = []
    if len(log.logs) != args.steps:
        problems.append("%d steps logged, %d asked" % (len(log.logs), args.steps))
    if not all(math.isfinite(l["loss"]) for l in log.logs):
        problems.append("a loss is not finite")
    if changed == 0:
        problems.append("no weight changed")
    if stale:
        problems.append("trajectories sampled with other weights than their step's: %s" % stale[:3])
    if any(b["prompts"] != args.prompts_per_step * args.num_generations for b in batches):
        problems.append("rollout_func got %s prompts per call" % [b["prompts"] for b in batches])
    if not drift < 1e-3:
        problems.append("the sampled logprobs differ from the model's on the trajectory's sequence by %.3g" % drift)
    for problem in problems:
        print("FAILED: %s" % problem, flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
