"""A client of effect-gym's rollout server (`effect-gym serve`), standard library only.

- ``Client.rollouts(requests)`` posts a batch to ``POST /v1/rollouts`` and yields each result as the
  server streams it (NDJSON, one trajectory per line, each group's lines when the group completes).
- ``make_rollout_func(...)`` is a TRL-style ``rollout_func(prompts, trainer)`` for ``GRPOTrainer``:
  it returns ``prompt_ids``, ``completion_ids``, ``logprobs`` and ``env_mask`` taken from each
  result's token sequence (``prompt_token_ids``, ``token_ids``, ``loss_mask``, ``logprobs``), with no
  re-tokenization, plus ``env_reward`` (and ``policy_version``) for the reward functions, and
  ``tool_calls``: each trajectory's calls with their answers (``tool_calls(result)``).
- A row may offer tools (``"tools"``: OpenAI's ``{"type": "function", "function": {...}}`` specs, and
  ``"tool_choice"``) on every call of its trajectories; a result's ``messages`` carry the calls
  (an assistant's ``tool_calls``, each answered by a ``tool`` message with its ``tool_call_id``), and
  its token sequence the calls' tokens (``loss_mask`` 1) and the answers' (0).

Copy this file next to your training script; it needs Python 3.8+ and nothing else.
"""

import http.client
import json
import urllib.parse

__all__ = ["Client", "EffectGymError", "make_rollout_func", "mark_truncation", "token_fields", "tool_calls", "truncation"]

NDJSON = "application/x-ndjson"
TRAJECTORIES_HEADER = "x-effect-gym-trajectories"


class EffectGymError(Exception):
    """The server refused or cut a request (``status``, and its ``{"error": {...}}`` as ``error``),
    a result had no token sequence, or trajectories failed."""

    def __init__(self, message, status=None, error=None):
        super().__init__(message)
        self.status = status
        self.error = error or {}


class Client:
    """effect-gym's rollout server at ``base_url`` (``http://127.0.0.1:8000``)."""

    def __init__(self, base_url="http://127.0.0.1:8000", api_key=None, timeout=3600.0):
        url = urllib.parse.urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError("base_url must be an http(s) URL, e.g. http://127.0.0.1:8000; got %r" % (base_url,))
        self._scheme = url.scheme
        self._host = url.hostname
        self._port = url.port
        self._prefix = url.path.rstrip("/")
        self._api_key = api_key
        self._timeout = timeout

    def _connection(self):
        cls = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=self._timeout)

    def _headers(self, accept="application/json"):
        headers = {"content-type": "application/json", "accept": accept}
        if self._api_key:
            headers["authorization"] = "Bearer " + self._api_key
        return headers

    def _request(self, method, path, body=None):
        connection = self._connection()
        try:
            data = None if body is None else json.dumps(body).encode("utf-8")
            connection.request(method, self._prefix + path, body=data, headers=self._headers())
            response = connection.getresponse()
            text = response.read().decode("utf-8")
            if response.status >= 400:
                raise _error_of(response.status, text)
            return json.loads(text)
        finally:
            connection.close()

    def health(self):
        return self._request("GET", "/health")

    def info(self):
        return self._request("GET", "/info")

    def set_policy_version(self, version):
        """``POST /v1/policy-version``: turns sampled from now on record ``version``."""
        return self._request("POST", "/v1/policy-version", {"version": version})

    def rollouts(self, requests, seed=None, sampling=None):
        """Yields each result (a completions-log line plus ``uuid``) as the server streams it.

        ``requests`` are rows: ``{"env_config": {...}, "messages": [...], "data_dict": {...},
        "num_generations": N, "max_turns": N, "sampling": {...}, "uuid": "...", "tools": [...],
        "tool_choice": "auto"}``. Results come in
        completion order, each with its ``row`` index and ``generation``. Raises ``EffectGymError``
        when the server refuses the batch, cuts the stream (it is shutting down), or the stream ends
        with fewer results than it admitted.
        """
        body = {"requests": list(requests)}
        if seed is not None:
            body["seed"] = seed
        if sampling is not None:
            body["sampling"] = sampling
        connection = self._connection()
        try:
            connection.request(
                "POST", self._prefix + "/v1/rollouts", body=json.dumps(body).encode("utf-8"), headers=self._headers(NDJSON)
            )
            response = connection.getresponse()
            if response.status >= 400:
                raise _error_of(response.status, response.read().decode("utf-8"))
            expected = response.getheader(TRAJECTORIES_HEADER)
            if not (response.getheader("content-type") or "").startswith(NDJSON):
                # Not a stream (the server answers an empty batch with a JSON array): its results as they are.
                for value in json.loads(response.read().decode("utf-8") or "[]"):
                    yield value
                return
            seen = 0
            while True:
                line = response.readline()
                if not line:
                    break
                line = line.strip()
                if not line:
                    continue
                value = json.loads(line.decode("utf-8"))
                if "server_error" in value:
                    error = value["server_error"]
                    raise EffectGymError(error.get("message", "the server cut the stream"), response.status, error)
                seen += 1
                yield value
            if expected is not None and seen < int(expected):
                raise EffectGymError(
                    "the stream ended after %d of %s results (the connection was lost)" % (seen, expected), response.status
                )
        finally:
            connection.close()


def _error_of(status, text):
    try:
        error = json.loads(text).get("error", {})
    except ValueError:
        error = {"message": text}
    message = error.get("message", text)
    if error.get("path") and not message.startswith(error["path"]):
        message = "%s: %s" % (error["path"], message)
    return EffectGymError("HTTP %d: %s" % (status, message), status, error)


def token_fields(result):
    """A result's token sequence as TRL wants it: ``(prompt_ids, completion_ids, logprobs, env_mask)``.

    ``completion_ids`` is everything after the prompt (the model's tokens and the env's tokens between
    turns, exactly as the server built the next prompts); ``env_mask`` is 1 on the model's tokens;
    ``logprobs`` is the sampled token's logprob, 0.0 on the env's tokens (as TRL pads tool output).
    """
    ids = result.get("token_ids")
    if ids is None:
        raise EffectGymError(
            "result %s has no token sequence: %s"
            % (result.get("id"), result.get("token_ids_unavailable", "the backend gives no token ids (a scripted policy)"))
        )
    logprobs = result.get("logprobs") or [None] * len(ids)
    return (
        list(result["prompt_token_ids"]),
        list(ids),
        [0.0 if lp is None else float(lp) for lp in logprobs],
        list(result["loss_mask"]),
    )


def tool_calls(result):
    """A result's tool calls in order, each with its answer: ``{"turn", "id", "name", "arguments",
    "result"}`` (``turn`` counts the model's replies from 1; ``arguments`` is the JSON text the model
    wrote; ``result`` the content of the ``tool`` message that answered it, None when none did)."""
    answers = {}
    for message in result.get("messages") or []:
        if message.get("role") == "tool" and message.get("tool_call_id") is not None:
            answers.setdefault(message["tool_call_id"], message.get("content"))
    calls = []
    turn = 0
    for message in result.get("messages") or []:
        if message.get("role") != "assistant":
            continue
        turn += 1
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            calls.append({
                "turn": turn,
                "id": call.get("id"),
                "name": function.get("name"),
                "arguments": function.get("arguments"),
                "result": answers.get(call.get("id")),
            })
    return calls


def truncation(result):
    """How a result's episode was cut: ``"length"`` (its last reply hit the token limit),
    ``"max_turns"`` (the env had not finished), or ``None`` (it finished: the env said done)."""
    reasons = result.get("finish_reasons") or []
    if reasons and reasons[-1] == "length":
        return "length"
    if result.get("end_reason") == "max_turns":
        return "max_turns"
    return None


def _end_ids(trainer):
    """The trainer tokenizer's ids that end a completion for TRL (``eos_token_id``, ``pad_token_id``)
    and an id that does not (the last id of ``"\n"``), or None without a tokenizer."""
    tokenizer = getattr(trainer, "processing_class", None)
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a processor's tokenizer, as TRL takes it
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None:
        return None
    ends = [i for i in (eos, getattr(tokenizer, "pad_token_id", None)) if i is not None]
    cut = None
    encode = getattr(tokenizer, "encode", None)
    if encode is not None:
        cut = next((i for i in reversed(encode("\n", add_special_tokens=False)) if i not in ends), None)
    return eos, ends, cut


def mark_truncation(completion_ids, logprobs, env_mask, truncated, end_ids):
    """Makes the completion's last token say what TRL reads: GRPOTrainer counts a completion as
    truncated (``completions/clipped_ratio``; dropped from the loss with ``mask_truncated_completions``)
    when its last id is neither ``eos_token_id`` nor ``pad_token_id``. A finished episode that does not
    end so (a reply cut by a stop string, a template whose end of turn is not the tokenizer's EOS) gets
    ``eos_token_id`` appended; a truncated one that does (its last reply ended, but ``max_turns`` came)
    gets the id of ``"\n"``. The added id has ``env_mask`` 0 and logprob 0.0: no loss on it, and being
    last it changes no other token's logits."""
    if end_ids is None or len(completion_ids) == 0:
        return
    eos, ends, cut = end_ids
    ended = completion_ids[-1] in ends
    extra = eos if truncated is None and not ended else cut if truncated is not None and ended else None
    if extra is None:
        return
    completion_ids.append(extra)
    logprobs.append(0.0)
    env_mask.append(0)


def _default_row(prompt, index):
    if isinstance(prompt, str):
        return {"messages": [{"role": "user", "content": prompt}]}
    if isinstance(prompt, list):
        return {"messages": prompt}
    if isinstance(prompt, dict):
        return dict(prompt)
    raise TypeError("cannot make a row of prompt %r: pass row=" % (prompt,))


def make_rollout_func(client, row=_default_row, seed=0, sampling=None, max_turns=None, tools=None, tool_choice=None):
    """A TRL ``rollout_func(prompts, trainer)`` that plays each prompt on effect-gym's server.

    TRL hands it the process's prompts, each already repeated ``num_generations`` times; each one
    becomes a row of one trajectory (``row(prompt, index)`` builds it: by default the prompt as the
    row's ``messages``; give your own to set ``env_config``). Each call uses the next batch seed
    (``seed``, ``seed + 1``, ...), so the copies of a prompt and the calls differ, reproducibly.
    ``tools`` (and ``tool_choice``) are offered on every row that does not give its own.

    Returns ``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask`` (one entry per prompt, in
    order) and, for the reward functions, ``env_reward`` (the env's total reward), ``num_turns``,
    ``truncated`` (``"length"``, ``"max_turns"`` or None: see ``truncation``) and ``policy_version``
    (the oldest version a turn was sampled with, or None) and ``tool_calls`` (see ``tool_calls``).
    The model's tool calls are in ``completion_ids`` with ``env_mask`` 1, the tools' answers with 0
    (the server's token sequence). With the trainer's tokenizer (TRL passes
    the trainer), each completion's last id says whether it was truncated as TRL reads it (see
    ``mark_truncation``). A trajectory that failed raises ``EffectGymError`` naming it: a failure is
    not a reward-0 sample.
    """
    if isinstance(client, str):
        client = Client(client)
    calls = [0]

    def rollout_func(prompts, trainer=None):
        out = {
            "prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
            "env_reward": [], "num_turns": [], "truncated": [], "policy_version": [], "tool_calls": [],
        }
        if len(prompts) == 0:
            return out
        requests = []
        for index, prompt in enumerate(prompts):
            request = row(prompt, index)
            request.setdefault("num_generations", 1)
            if max_turns is not None:
                request.setdefault("max_turns", max_turns)
            if tools is not None and "tools" not in request:
                request["tools"] = tools
                if tool_choice is not None:
                    request["tool_choice"] = tool_choice
            requests.append(request)
        batch_seed = seed + calls[0]
        calls[0] += 1
        results = sorted(client.rollouts(requests, seed=batch_seed, sampling=sampling), key=lambda r: (r["row"], r["generation"]))
        if len(results) != len(prompts):
            raise EffectGymError("expected %d results, got %d" % (len(prompts), len(results)))
        failed = [r for r in results if r.get("error") is not None]
        if failed:
            raise EffectGymError(
                "%d of %d trajectories failed; first: %s: %s"
                % (len(failed), len(results), failed[0]["id"], failed[0]["error"].get("message")),
                error={"failed": [{"id": r["id"], "uuid": r.get("uuid"), "error": r["error"]} for r in failed]},
            )
        end_ids = _end_ids(trainer)
        for result in results:
            prompt_ids, completion_ids, logprobs, env_mask = token_fields(result)
            truncated = truncation(result)
            mark_truncation(completion_ids, logprobs, env_mask, truncated, end_ids)
            out["truncated"].append(truncated)
            out["prompt_ids"].append(prompt_ids)
            out["completion_ids"].append(completion_ids)
            out["logprobs"].append(logprobs)
            out["env_mask"].append(env_mask)
            out["env_reward"].append(result["rollout_infos"]["total_reward"])
            out["num_turns"].append(result["rollout_infos"]["num_turns"])
            versions = [v for v in result.get("policy_versions") or [] if v is not None]
            out["policy_version"].append(min(versions) if versions else None)
            out["tool_calls"].append(tool_calls(result))
        return out

    return rollout_func
