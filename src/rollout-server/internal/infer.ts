/**
 * `POST /infer/`, the reference's rollout endpoint (ms-swift's rollout server): `infer_requests` and
 * `request_config` in, one `RolloutOutput`-shaped object per request out. It is a translation at
 * the edge: the requests are planned and run as a `/v1/rollouts` batch of one generation each.
 *
 * - Every `RequestConfig` field is honoured or refused with a 400 naming it (see `Api.RequestConfig`);
 *   each request's `chat_template_kwargs` and `tools` reach its calls (see `tools.ts`).
 * - A failed trajectory must not reach the trainer as a reward-0 sample (it cannot tell it from a
 *   real zero): by default (`retry`) a trajectory that failed with a transient error is run again
 *   with a fresh env (the same seed: the engine's trajectory retries, `Rollout.Config.retries`,
 *   `--infer-retries` times), and if some still fail the request fails with a 500 whose body
 *   lists each failed request's uuid and error. `zero-reward` answers every request, failed ones as
 *   outputs with reward 0 and the error in `rollout_infos.error` (the behaviour before).
 */
import { Effect, Result } from "effect"
import * as Api from "../Api.js"
import type { Message } from "../../Message.js"
import { ApiError, decodeBody } from "./http.js"
import { type CallFormat, fromAgentFormat, replyText, swiftMessages } from "./tools.js"
import { type Plan, type PlannedRow, type Planner, planRow, samplingProblem, toolsOf, unsupported } from "./planning.js"

// The reference's clients send fields this server has no use for (metrics, use_tqdm, ...).
export const decodeInfer = decodeBody(Api.InferBody, { excess: "ignore" })

/**
 * What `/infer/` does with trajectories that failed.
 *
 * @since 0.2.0
 * @category models
 */
export type OnFailure = "retry" | "zero-reward"

/** The requests, every one checked, as a plan of one generation per request. */
export const planInfer = (planner: Planner, body: Api.InferBody): Result.Result<Plan, ApiError> => {
  const rc = body.request_config ?? undefined
  const config = planner.baseConfig(rc?.seed ?? planner.seed)
  const sampling = Api.toSamplingParams(rc)
  const regex = rc?.structured_outputs_regex
  if (regex !== null && regex !== undefined) {
    if (regex === "") {
      return Result.fail(
        new ApiError({ reason: "InvalidBody", path: "request_config.structured_outputs_regex", detail: "must not be empty" })
      )
    }
    ;(sampling as { structuredOutputsRegex?: string }).structuredOutputsRegex = regex
  }
  const bad = samplingProblem(planner, "request_config", sampling)
  if (bad !== undefined) return Result.fail(bad)
  const rows: Array<PlannedRow> = []
  for (let i = 0; i < body.infer_requests.length; i++) {
    const r = body.infer_requests[i]
    const kwargs = r.chat_template_kwargs ?? undefined
    const hasKwargs = kwargs !== undefined && Object.keys(kwargs).length > 0
    if (hasKwargs && !(planner.honours?.has("chatTemplateKwargs") ?? false)) {
      return Result.fail(unsupported(planner, `infer_requests[${i}].chat_template_kwargs`))
    }
    const messages = fromAgentFormat(r.messages, `infer_requests[${i}].messages`)
    if (Result.isFailure(messages)) return Result.fail(messages.failure)
    const planned = planRow(planner, config, i, {
      prefix: `infer_requests[${i}]`,
      messages: messages.success,
      envConfig: undefined,
      dataDict: r.data_dict,
      // The trainer's request id (`chatcmpl-<hex>`); one of the same shape when it gives none.
      uuid: r.uuid ?? `chatcmpl-${crypto.randomUUID().replaceAll("-", "")}`,
      numGenerations: 1,
      maxTurns: undefined
    })
    if (Result.isFailure(planned)) return Result.fail(planned.failure)
    const tools = toolsOf(`infer_requests[${i}]`, r)
    if (Result.isFailure(tools)) return Result.fail(tools.failure)
    rows.push({ ...planned.success, sampling, chatTemplateKwargs: hasKwargs ? kwargs : undefined, ...tools.success })
  }
  return Result.succeed({
    rows,
    config,
    trajectories: rows.length,
    returnDetails: rc?.return_details === true,
    logprobs: rc?.logprobs === true
  })
}

/** The fields a backend may refuse that are a request's own, not `request_config`'s. */
const REQUEST_FIELDS: ReadonlySet<string> = new Set(["chat_template_kwargs", "tools", "tool_choice"])

/**
 * Runs the plan under the failure policy: the results by row index, or the 500 listing the
 * trajectories that still failed. Under `retry`, the engine runs a transiently failed trajectory
 * again (`Rollout.Config.retries`: a fresh env, the same seed, backoff; `Scheduler.isTransient`
 * decides what is transient) up to `retries` times; `run` runs the plan with that config.
 */
export const runInfer = (
  plan: Plan,
  run: (plan: Plan) => Effect.Effect<ReadonlyArray<Api.RolloutResult>, ApiError>,
  policy: {
    readonly onFailure: OnFailure
    readonly retries: number
    /** Whether the backend samples tokens (a model; not a scripted policy): `logprobs: true` must be met. */
    readonly hasLogprobs: boolean
  }
): Effect.Effect<Map<number, Api.RolloutResult>, ApiError> =>
  Effect.gen(function*() {
    const retried = policy.onFailure === "retry" ? { ...plan, config: { ...plan.config, retries: policy.retries } } : plan
    const results = new Map<number, Api.RolloutResult>()
    for (const line of yield* run(retried)) results.set(line.row, line)
    // A request field the backend rejected (`InferenceError.field`, with --mode server): the request
    // is refused with a 400 naming it, whatever the failure policy, never answered without it.
    for (const row of plan.rows) {
      const error = results.get(row.row.index)?.error
      const field = error?._tag === "InferenceError" && typeof error.field === "string" ? error.field : undefined
      if (field === undefined || error === undefined || error === null) continue
      // (the env's own tools, refused by the backend, fail their trajectories: the request gave none)
      if ((field === "tools" || field === "tool_choice") && row.tools === undefined) continue
      return yield* new ApiError({
        reason: "InvalidBody",
        path: REQUEST_FIELDS.has(field) ? `infer_requests[${row.row.index}].${field}` : `request_config.${field}`,
        detail: `this server's inference backend cannot honour it, so it is refused (${error.message})`
      })
    }
    // `logprobs: true` that the backend did not honour (it rejected the field, which server mode then
    // drops as its own default, or gives none): refused, not answered with empty rollout_logprobs.
    if (plan.logprobs === true && policy.hasLogprobs) {
      for (const row of plan.rows) {
        const line = results.get(row.row.index)
        if (line === undefined || line.error !== null || line.rollout_infos.num_turns === 0) continue
        const lists = line.rollout_logprobs
        if (lists !== undefined && lists.length === line.rollout_infos.num_turns && lists.every((l) => l !== null)) continue
        return yield* new ApiError({
          reason: "InvalidBody",
          path: "request_config.logprobs",
          detail: `this server's inference backend gave no logprobs for infer_requests[${row.row.index}] ` +
            `(it rejected them, or does not return them), so the request is refused rather than answered without them`
        })
      }
    }
    if (policy.onFailure === "retry") {
      const failed = plan.rows.flatMap((row) => {
        const line = results.get(row.row.index)
        if (line === undefined || line.error === null) return []
        return [{ index: row.row.index, uuid: line.uuid, attempts: line.attempts ?? 1, error: line.error }]
      })
      if (failed.length > 0) {
        const first = failed[0]
        return yield* new ApiError({
          reason: "TrajectoriesFailed",
          detail: `${failed.length} of ${plan.rows.length} trajectories failed` +
            (policy.retries > 0 ? ` (transient failures were retried up to ${policy.retries} times)` : "") +
            `; a failed trajectory is not sent as a reward-0 sample (--on-failure zero-reward does that). ` +
            `First: ${first.uuid}: ${first.error.message}`,
          failed
        })
      }
    }
    return results
  })

/** How the outputs of a plan are written. */
export interface OutputOptions {
  readonly model: string
  readonly created: number
  readonly returnDetails: boolean
  /** How a reply's tool calls are written in its text (the backend's tool parser's format). */
  readonly callFormat: CallFormat
}

/** The results of a plan, in request order, in the reference's shape. */
export const inferOutputs = (
  plan: Plan,
  byRow: ReadonlyMap<number, Api.RolloutResult>,
  options: OutputOptions
): Array<Api.InferOutput> => plan.rows.map((planned) => toInferOutput(byRow.get(planned.row.index)!, options))

/** The prompt of the last turn, from a line's token sequence: the first prompt and all before the last reply. */
const lastPrompt = (line: Api.RolloutResult): Array<number> | undefined => {
  const prompt = line.prompt_token_ids
  const ids = line.token_ids
  const mask = line.loss_mask
  if (prompt === undefined || ids === undefined || ids === null || mask === undefined) return undefined
  let start = -1
  for (let i = 0; i < mask.length; i++) if (mask[i] === 1 && (i === 0 || mask[i - 1] === 0)) start = i
  return start < 0 ? undefined : [...prompt, ...ids.slice(0, start)]
}

/**
 * A result in the reference's `RolloutOutput` shape. A conversation with tool calls is in the
 * reference's form (see `swiftMessages`); the last reply's calls are also `tool_calls` in
 * `response`, as the reference's engine gives them, and a reply that ended with calls finished with
 * `stop` (the reference's finish reasons are vLLM's: `stop`, `length`).
 */
const toInferOutput = (line: Api.RolloutResult, options: OutputOptions): Api.InferOutput => {
  const { created, model, returnDetails } = options
  const turns = line.finish_reasons.length
  const complete = <A>(lists: ReadonlyArray<ReadonlyArray<A> | null> | undefined): Array<ReadonlyArray<A>> =>
    lists !== undefined && lists.length === turns && lists.every((l) => l !== null)
      ? lists as Array<ReadonlyArray<A>>
      : []
  const lastIds = turns === 0 ? null : line.response_token_ids?.[turns - 1] ?? null
  let last: Message | undefined
  for (let i = line.messages.length - 1; i >= 0 && last === undefined; i--) {
    if (line.messages[i].role === "assistant") last = line.messages[i]
  }
  const reply = last === undefined ? "" : replyText(options.callFormat, last)
  const calls = last?.tool_calls
  const finish = turns === 0 ? undefined : line.finish_reasons[turns - 1]
  const completionTokens = lastIds?.length ?? 0
  const promptIds = returnDetails ? lastPrompt(line) : undefined
  const promptTokens = promptIds?.length ?? 0
  // (a failed trajectory's line has no reward, `null`: the reference's shape has numbers, and a
  // failed trajectory answered here is a reward-0 output, `--on-failure zero-reward`)
  const infos: Record<string, unknown> = {
    ...line.rollout_infos,
    total_reward: line.rollout_infos.total_reward ?? 0,
    step_rewards: line.rollout_infos.step_rewards ?? [],
    end_reason: line.end_reason,
    error: line.error
  }
  if (line.policy_versions !== undefined) infos.policy_versions = line.policy_versions
  return {
    response: {
      // The request's id, as the reference's engine answers (the trainer matches outputs by it).
      id: line.uuid,
      object: "chat.completion",
      created,
      model,
      choices: [{
        index: 0,
        message: calls === undefined || calls.length === 0
          ? { role: "assistant", content: reply }
          : { role: "assistant", content: reply, tool_calls: calls },
        finish_reason: finish === "stop" || finish === "length" ? finish : finish === "tool_calls" ? "stop" : null,
        logprobs: null,
        token_ids: returnDetails ? lastIds : null
      }],
      usage: { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens },
      ...(promptIds === undefined ? {} : { prompt_token_ids: promptIds })
    },
    messages: swiftMessages(options.callFormat, line.messages),
    response_token_ids: complete(line.response_token_ids),
    response_loss_mask: complete(line.response_loss_mask),
    rollout_infos: infos as Api.InferOutput["rollout_infos"],
    rollout_logprobs: complete(line.rollout_logprobs),
    prompt_logprobs: null,
    uuid: line.uuid
  }
}
