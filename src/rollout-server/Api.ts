/**
 * The wire shapes of the rollout server, shared by the server (which decodes requests with them) and
 * `RolloutClient` (which decodes responses with them): request bodies, result lines, error bodies,
 * `/info`, and the `/infer/` compatibility shapes.
 *
 * Field names are snake_case, as in `completions.jsonl` and the OpenAI API. `null` is accepted
 * wherever a field is optional (Python clients send `None`) and means "not given".
 *
 * @since 0.1.0
 */
import { Effect, Schema, SchemaGetter, SchemaIssue } from "effect"
import { CompletionLine, LoggedError } from "../CompletionsLog.js"
import type { SamplingParams } from "../Inference.js"
import { Message, Messages, Role, ToolCall } from "../Message.js"
import { isWhole } from "../internal/whole.js"
import { LIMITS } from "../RunSpec.js"
import { stringify } from "../internal/lift.js"

/**
 * The media type of a streamed response: one JSON value per line.
 *
 * @since 0.1.0
 * @category constants
 */
export const NDJSON = "application/x-ndjson"

/**
 * A response header with the number of trajectories the server admitted for the request, so that a
 * client can tell a complete stream from a cut one.
 *
 * @since 0.1.0
 * @category constants
 */
export const TRAJECTORIES_HEADER = "x-effect-gym-trajectories"

/**
 * @since 0.1.0
 * @category schemas
 */
export const JsonObject = Schema.Record(Schema.String, Schema.Unknown).annotate({ message: "expected a JSON object" })

const optionalNullable = <S extends Schema.Top>(schema: S) => Schema.optional(Schema.NullOr(schema))

/** An optional JSON object: the message is the field's, whatever the union of null and absent says. */
const optionalJsonObject = optionalNullable(JsonObject).annotate({ message: "expected a JSON object" })

/**
 * Tools offered to the model, each OpenAI's `{"type": "function", "function": {"name", "description",
 * "parameters"}}` or the function object alone (as ms-swift's `wrap_tool` takes both); each is
 * checked when the request is planned, with errors that name it.
 */
const Tools = optionalNullable(Schema.Array(Schema.Unknown)).annotate({ message: "expected a list of tools, or null" })

/** OpenAI's `tool_choice`: `"auto"`, `"none"`, `"required"` or `{"type": "function", "function": {"name"}}`. */
const ToolChoice = optionalNullable(Schema.Unknown)

const formatActual = (actual: unknown): string => typeof actual === "bigint" ? `${actual}` : `${stringify(actual)}`

/**
 * A number with a check, one message for every way it can be wrong (a string, 1.5, 0, 2^60): the
 * value is checked as it came, before it is decoded as a number.
 */
const checkedNumber = (ok: (n: number) => boolean, expected: string | ((input: unknown) => string)) =>
  Schema.Unknown.pipe(Schema.decodeTo(Schema.Number, {
    decode: SchemaGetter.transformEffect((input: unknown) =>
      typeof input === "number" && ok(input)
        ? Effect.succeed(input)
        : Effect.fail(
          new SchemaIssue.InvalidValue({
            message: `expected ${typeof expected === "string" ? expected : expected(input)}, got ${formatActual(input)}`
          })
        )
    ),
    encode: SchemaGetter.passthrough({ strict: false })
  }))

/**
 * A whole number >= 1 up to one of the run spec's limits (`RunSpec.LIMITS`: a row's group size and
 * turns are the run's `numGenerations` and `maxTurns`, refused past the same bounds as `--num-generations`,
 * `--max-turns` and `Rollout.make`).
 */
const limited = (limit: { readonly max: number; readonly reason: string }) =>
  checkedNumber(
    (n) => isWhole(n, 1) && n <= limit.max,
    // (2^53 and past are whole numbers too, over the limit, though not safe integers: the body's reader
    // gives such an integer as a bigint)
    (input) =>
      (typeof input === "number" && Number.isInteger(input) && input >= 1) || (typeof input === "bigint" && input >= 1n)
        ? `at most ${limit.max} (${limit.reason})`
        : "a whole number >= 1"
  )

const Seed = checkedNumber(Number.isSafeInteger, "a safe integer")

/**
 * Sampling overrides with the OpenAI API's names. Checked against the same ranges as the command
 * line's sampling options before anything runs.
 *
 * @since 0.1.0
 * @category schemas
 */
export const SamplingOverrides = Schema.Struct({
  temperature: optionalNullable(Schema.Number),
  top_p: optionalNullable(Schema.Number),
  top_k: optionalNullable(Schema.Int),
  max_tokens: optionalNullable(Schema.Int),
  stop: optionalNullable(Schema.Union([Schema.String, Schema.Array(Schema.String)])),
  presence_penalty: optionalNullable(Schema.Number),
  frequency_penalty: optionalNullable(Schema.Number),
  /** Ask the backend for token ids and logprobs (server mode asks by default). */
  logprobs: optionalNullable(Schema.Boolean),
  /** vLLM's min_p, in [0, 1] (0: no limit); above 0 only with a backend that honours it. */
  min_p: optionalNullable(Schema.Number),
  /** vLLM's repetition_penalty, > 0 (1: none); another value only with a backend that honours it. */
  repetition_penalty: optionalNullable(Schema.Number)
})

/**
 * @since 0.1.0
 * @category models
 */
export type SamplingOverrides = typeof SamplingOverrides.Type

/**
 * Each override's field name, by the option name `Sampling.problems` reports it under (so that a
 * bad value is reported at its path in the body).
 *
 * @since 0.1.0
 * @category constants
 */
export const SAMPLING_FIELDS: Readonly<Record<string, string>> = {
  "--temperature": "temperature",
  "--top-p": "top_p",
  "--top-k": "top_k",
  "--max-tokens": "max_tokens",
  "--stop": "stop",
  "--presence-penalty": "presence_penalty",
  "--frequency-penalty": "frequency_penalty",
  "min_p": "min_p",
  "repetition_penalty": "repetition_penalty",
  "structured_outputs_regex": "structured_outputs_regex"
}

/**
 * Sampling overrides as the core's `SamplingParams` (only the fields that are set).
 *
 * @since 0.1.0
 * @category conversions
 */
export const toSamplingParams = (overrides: SamplingOverrides | null | undefined): SamplingParams => {
  if (overrides === null || overrides === undefined) return {}
  const out: Record<string, unknown> = {}
  const set = (key: keyof SamplingParams, value: unknown) => {
    if (value !== null && value !== undefined) out[key] = value
  }
  set("temperature", overrides.temperature)
  set("topP", overrides.top_p)
  // vLLM's "no limit" is -1 or 0 (ms-swift's trainer sends -1); -1 is the one this project says it with.
  set("topK", overrides.top_k === 0 ? -1 : overrides.top_k)
  set("maxTokens", overrides.max_tokens)
  // An empty list is the reference's default: no stop strings, as when the field is absent.
  const stop = typeof overrides.stop === "string" ? [overrides.stop] : overrides.stop
  if (stop !== null && stop !== undefined && stop.length > 0) out.stop = stop
  set("presencePenalty", overrides.presence_penalty)
  set("frequencyPenalty", overrides.frequency_penalty)
  set("logprobs", overrides.logprobs)
  set("minP", overrides.min_p)
  set("repetitionPenalty", overrides.repetition_penalty)
  return out as SamplingParams
}

/**
 * One row of a `POST /v1/rollouts` batch: a dataset row (`messages`, `env_config`, and the row's
 * other columns as `data_dict`) and how to run it.
 *
 * @since 0.1.0
 * @category schemas
 */
export const RolloutRequest = Schema.Struct({
  /** The prompt, when the env does not write it. */
  messages: optionalNullable(Messages),
  /** The env's config; `name` selects the env (else the server's `--env`). */
  env_config: optionalJsonObject,
  /** The row's other columns; they reach the env's `reset` as `dataDict`. May hold `env_config` instead. */
  data_dict: optionalJsonObject,
  /** Echoed in every result of this row (a random UUID when absent). */
  uuid: optionalNullable(Schema.String.check(
    Schema.isMinLength(1, { expected: "a string at least 1 character(s) long" }),
    Schema.isMaxLength(256, { expected: "a string at most 256 character(s) long" })
  )),
  /** The GRPO group size for this row (default: the server's `--num-generations`). */
  num_generations: optionalNullable(limited(LIMITS.numGenerations)),
  /** Default: the server's `--max-turns`. */
  max_turns: optionalNullable(limited(LIMITS.maxTurns)),
  /** Over the batch's and the server's sampling parameters. */
  sampling: optionalNullable(SamplingOverrides),
  /** Tools offered to the model on every call of this row's trajectories, next to the env's own. */
  tools: Tools,
  /** How the model may use them (default `auto`); only with `tools`. */
  tool_choice: ToolChoice
})

/**
 * @since 0.1.0
 * @category models
 */
export type RolloutRequest = typeof RolloutRequest.Type

/**
 * The body of `POST /v1/rollouts`.
 *
 * @since 0.1.0
 * @category schemas
 */
export const RolloutBatch = Schema.Struct({
  requests: Schema.Array(RolloutRequest),
  /** The seed of this batch's trajectories (default: the server's `--seed`): same batch, same results. */
  seed: optionalNullable(Seed),
  /** Sampling overrides for every row of the batch (a row's own win). */
  sampling: optionalNullable(SamplingOverrides)
})

/**
 * @since 0.1.0
 * @category models
 */
export type RolloutBatch = typeof RolloutBatch.Type

/**
 * One result: a `completions.jsonl` line (`row` is the row's index in the batch) plus the row's
 * `uuid`.
 *
 * @since 0.1.0
 * @category schemas
 */
export const RolloutResult = Schema.Struct({ ...CompletionLine.fields, uuid: Schema.String })

/**
 * @since 0.1.0
 * @category models
 */
export type RolloutResult = typeof RolloutResult.Type

/**
 * What every error response carries: an OpenAI-style `{"error": {"type", "message"}}`, with the
 * offending field's `path` for invalid bodies and a `retry_after_ms` hint for 429.
 *
 * @since 0.1.0
 * @category schemas
 */
export const ErrorDetail = Schema.StructWithRest(
  Schema.Struct({
    type: Schema.String,
    message: Schema.String,
    path: Schema.optional(Schema.String),
    retry_after_ms: Schema.optional(Schema.Number)
  }),
  [Schema.Record(Schema.String, Schema.Unknown)]
)

/**
 * @since 0.1.0
 * @category schemas
 */
export const ErrorBody = Schema.Struct({ error: ErrorDetail })

/**
 * The last line of a stream that the server had to cut (it is shutting down): no result line has
 * this key.
 *
 * @since 0.1.0
 * @category schemas
 */
export const ServerErrorLine = Schema.Struct({ server_error: ErrorDetail })

/**
 * @since 0.1.0
 * @category schemas
 */
export const Health = Schema.Struct({
  status: Schema.Literals(["ok", "draining"]),
  trajectories_in_flight: Schema.Number
})

const Named = Schema.Struct({ name: Schema.String, description: Schema.String })

/**
 * `GET /info`.
 *
 * @since 0.1.0
 * @category schemas
 */
export const Info = Schema.Struct({
  name: Schema.String,
  version: Schema.String,
  inference: Schema.Struct({
    mode: Schema.String,
    model: Schema.NullOr(Schema.String),
    backend: Schema.String
  }),
  scheduler: Schema.String,
  default_env: Schema.NullOr(Schema.String),
  envs: Schema.Array(Named),
  schedulers: Schema.Array(Named),
  reward_functions: Schema.Array(Named),
  reward_columns: Schema.Array(Schema.Struct({ name: Schema.String, weight: Schema.Number })),
  defaults: Schema.Struct({
    num_generations: Schema.Number,
    max_turns: Schema.Number,
    seed: Schema.Number,
    sampling: JsonObject
  }),
  limits: Schema.Struct({
    max_trajectories_in_flight: Schema.Number,
    max_request_trajectories: Schema.Number,
    max_body_bytes: Schema.Number,
    shutdown_grace_seconds: Schema.Number,
    /** Results that may wait for one client, for all of them, and how long a client may read nothing. */
    max_response_bytes: Schema.optional(Schema.Number),
    max_buffered_bytes: Schema.optional(Schema.Number),
    write_timeout_seconds: Schema.optional(Schema.Number)
  }),
  auth: Schema.Boolean,
  /** The policy version (`POST /v1/policy-version`, or a forwarded weight sync) and the turns sampled under each. */
  policy: Schema.optional(Schema.Struct({
    version: Schema.Number,
    versioned: Schema.Boolean,
    updated_at: Schema.NullOr(Schema.String),
    turns_by_version: Schema.Record(Schema.String, Schema.Number)
  })),
  in_flight: Schema.Struct({
    trajectories: Schema.Number,
    requests: Schema.Number,
    /** Bytes of results waiting for their clients to read them. */
    buffered_bytes: Schema.optional(Schema.Number)
  })
})

/**
 * @since 0.1.0
 * @category models
 */
export type Info = typeof Info.Type

// ---------------------------------------------------------------------------------------------
// POST /infer/: the reference's shape
// ---------------------------------------------------------------------------------------------

/** Multimodal inputs are not supported; Python clients send them empty. */
const MustBeEmpty = Schema.Unknown.check(
  Schema.makeFilter((value) =>
    value === null || (Array.isArray(value) && value.length === 0) ||
    (typeof value === "object" && !Array.isArray(value) && Object.keys(value).length === 0) ||
    "not supported by this server (text only: no images, audios, videos or objects)"
  )
)

/**
 * The messages of an `/infer/` request: OpenAI's roles, and the reference's agent format (its
 * dataset's `tool_call` messages, whose content is a call's JSON, and `tool_response`, a tool's
 * answer), which the request's plan turns into OpenAI's form.
 *
 * @since 0.3.0
 * @category schemas
 */
export const InferMessages = Schema.Array(Schema.Struct({
  ...Message.fields,
  role: Schema.Literals([...Role.literals, "tool_call", "tool_response"])
}))

/**
 * One request of `POST /infer/` (the reference's `RolloutInferRequest`). Unknown fields are ignored,
 * as the reference's server ignores them.
 *
 * @since 0.1.0
 * @category schemas
 */
export const InferRequest = Schema.Struct({
  messages: InferMessages,
  data_dict: optionalJsonObject,
  uuid: optionalNullable(Schema.String),
  /** Variables of the model's chat template for this request's calls (over the server's). */
  chat_template_kwargs: optionalJsonObject,
  images: Schema.optional(MustBeEmpty),
  audios: Schema.optional(MustBeEmpty),
  videos: Schema.optional(MustBeEmpty),
  /** Tools offered to the model on every call of the trajectory, next to the env's own. */
  tools: Tools,
  /** Not a field of the reference's request (it has none): how the model may use `tools` (default `auto`). */
  tool_choice: ToolChoice,
  objects: Schema.optional(MustBeEmpty)
})

const Exactly = <A extends number | boolean>(expected: A, what: string) =>
  Schema.Unknown.check(
    Schema.makeFilter((value) => value === null || value === expected || `${what} (only ${String(expected)} is supported)`)
  )

/** A field accepted only as `null` (not given). */
const OnlyNull = (what: string) =>
  Schema.Unknown.check(Schema.makeFilter((value) => value === null || `${what} (only null is supported)`))

/**
 * The reference's `RequestConfig` (ms-swift's `swift/infer_engine/protocol.py`). Every field is
 * either honoured or rejected (400 naming it), none ignored: sampling fields are applied to every
 * call of the trajectory (`min_p`, `repetition_penalty` and `structured_outputs_regex` only by a
 * backend that honours them, else 400); `seed` seeds the batch; `logprobs` asks for per-token
 * logprobs; `return_details` gives the last turn's token ids (and prompt token ids) in `response`;
 * fields this server cannot honour are accepted only with their default value.
 *
 * @since 0.1.0
 * @category schemas
 */
export const RequestConfig = Schema.Struct({
  ...SamplingOverrides.fields,
  /** The seed of the batch's trajectories (each call's seed is derived from it). */
  seed: optionalNullable(Seed),
  n: Schema.optional(Exactly(1, "one output per request: repeat the request for a group")),
  num_beams: Schema.optional(Exactly(1, "beam search is not supported")),
  best_of: Schema.optional(Exactly(1, "best_of is not supported")),
  stream: Schema.optional(Exactly(false, "streaming is not supported on /infer/ (use POST /v1/rollouts)")),
  length_penalty: Schema.optional(Exactly(1, "length_penalty is not supported")),
  top_logprobs: Schema.optional(
    Exactly(0, "only the sampled token's logprob is returned (rollout_logprobs): top_logprobs is not supported")
  ),
  prompt_logprobs: Schema.optional(
    OnlyNull("a multi-turn rollout has no single prompt: prompt_logprobs is not supported (ask a scoring server for them)")
  ),
  /** Whether `response` carries the last turn's `token_ids` and `prompt_token_ids`. */
  return_details: optionalNullable(Schema.Boolean),
  /** Constrain every reply to a regular expression (vLLM's structured outputs); only with a backend that honours it. */
  structured_outputs_regex: optionalNullable(Schema.String)
})

/**
 * The body of `POST /infer/`.
 *
 * @since 0.1.0
 * @category schemas
 */
export const InferBody = Schema.Struct({
  infer_requests: Schema.Array(InferRequest),
  request_config: optionalNullable(RequestConfig),
  adapter_request: Schema.optional(
    OnlyNull("LoRA adapter requests are not supported: the backend serves the trainer's weights (synced through this server)")
  )
})

/**
 * @since 0.1.0
 * @category models
 */
export type InferBody = typeof InferBody.Type

/**
 * One output of `POST /infer/` (the reference's `RolloutOutput`): the whole conversation, per-turn
 * token ids, loss masks and logprobs (empty lists when some turn's backend gave none: the trainer
 * then tokenizes the messages itself), `rollout_infos` (`total_reward`, `step_rewards`, `num_turns`,
 * ...), and `response`, an OpenAI chat completion of the last turn. With tool calls, `messages` is in
 * the reference's form: each reply's calls written in its text, no `tool_calls` (the reference's
 * template would render them twice).
 *
 * @since 0.1.0
 * @category schemas
 */
export const InferOutput = Schema.Struct({
  response: Schema.Struct({
    id: Schema.String,
    object: Schema.Literal("chat.completion"),
    created: Schema.Number,
    model: Schema.String,
    choices: Schema.Array(Schema.Struct({
      index: Schema.Number,
      /**
       * The last reply, as the reference's `ChatMessage`: `content` is its whole text (calls written
       * in it), `tool_calls` its calls, when it made some.
       */
      message: Schema.Struct({
        role: Schema.Literal("assistant"),
        content: Schema.String,
        tool_calls: Schema.optional(Schema.Array(ToolCall))
      }),
      finish_reason: Schema.NullOr(Schema.Literals(["stop", "length"])),
      logprobs: Schema.Null,
      token_ids: Schema.NullOr(Schema.Array(Schema.Number))
    })),
    usage: Schema.Struct({
      prompt_tokens: Schema.Number,
      completion_tokens: Schema.Number,
      total_tokens: Schema.Number
    }),
    /** The last turn's prompt as tokens (`return_details`), when the trajectory has a token sequence. */
    prompt_token_ids: Schema.optional(Schema.Array(Schema.Number))
  }),
  messages: Messages,
  response_token_ids: Schema.Array(Schema.Array(Schema.Number)),
  response_loss_mask: Schema.Array(Schema.Array(Schema.Number)),
  rollout_infos: Schema.StructWithRest(
    Schema.Struct({
      total_reward: Schema.Number,
      step_rewards: Schema.Array(Schema.Number),
      num_turns: Schema.Number,
      end_reason: Schema.Literals(["done", "max_turns", "error"]),
      error: Schema.NullOr(LoggedError)
    }),
    [Schema.Record(Schema.String, Schema.Unknown)]
  ),
  rollout_logprobs: Schema.Array(Schema.Array(Schema.Number)),
  prompt_logprobs: Schema.optional(Schema.Null),
  uuid: Schema.String
})

/**
 * @since 0.1.0
 * @category models
 */
export type InferOutput = typeof InferOutput.Type
