/**
 * `POST /infer/`, the reference's rollout endpoint (ms-swift's rollout server): `infer_requests` and
 * `request_config` in, one `RolloutOutput`-shaped object per request out. It is a translation at
 * the edge: the requests are planned and run as a `/v1/rollouts` batch of one generation each.
 */
import { Either } from "effect"
import * as Api from "../Api.js"
import { type ApiError, decodeBody } from "./http.js"
import { type Plan, type PlannedRow, type Planner, planRow, samplingProblem } from "./planning.js"

// The reference's clients send fields this server has no use for (metrics, template, ...).
export const decodeInfer = decodeBody(Api.InferBody, { excess: "ignore" })

/** The requests, every one checked, as a plan of one generation per request. */
export const planInfer = (planner: Planner, body: Api.InferBody): Either.Either<Plan, ApiError> => {
  const rc = body.request_config ?? undefined
  const config = planner.baseConfig(rc?.seed ?? planner.seed)
  const sampling = Api.toSamplingParams(rc)
  const bad = samplingProblem("request_config", sampling)
  if (bad !== undefined) return Either.left(bad)
  const rows: Array<PlannedRow> = []
  for (let i = 0; i < body.infer_requests.length; i++) {
    const r = body.infer_requests[i]
    const planned = planRow(planner, config, i, {
      prefix: `infer_requests[${i}]`,
      messages: r.messages,
      envConfig: undefined,
      dataDict: r.data_dict,
      uuid: r.uuid,
      numGenerations: 1,
      maxTurns: undefined
    })
    if (Either.isLeft(planned)) return Either.left(planned.left)
    rows.push({ ...planned.right, sampling })
  }
  return Either.right({ rows, config, trajectories: rows.length })
}

/** The results of a plan, in request order, in the reference's shape. */
export const inferOutputs = (
  plan: Plan,
  results: Iterable<ReadonlyArray<Api.RolloutResult>>,
  model: string,
  created: number
): Array<Api.InferOutput> => {
  const byRow = new Map<number, Api.RolloutResult>()
  for (const group of results) for (const line of group) byRow.set(line.row, line)
  return plan.rows.map((planned) => toInferOutput(byRow.get(planned.row.index)!, model, created))
}

/** A result in the reference's `RolloutOutput` shape. */
const toInferOutput = (line: Api.RolloutResult, model: string, created: number): Api.InferOutput => {
  const turns = line.finish_reasons.length
  const complete = <A>(lists: ReadonlyArray<ReadonlyArray<A> | null> | undefined): Array<ReadonlyArray<A>> =>
    lists !== undefined && lists.length === turns && lists.every((l) => l !== null)
      ? lists as Array<ReadonlyArray<A>>
      : []
  const lastIds = turns === 0 ? null : line.response_token_ids?.[turns - 1] ?? null
  let reply = ""
  for (let i = line.messages.length - 1; i >= 0; i--) {
    if (line.messages[i].role === "assistant") {
      reply = line.messages[i].content
      break
    }
  }
  const finish = turns === 0 ? undefined : line.finish_reasons[turns - 1]
  const completionTokens = lastIds?.length ?? 0
  return {
    response: {
      id: `chatcmpl-${line.uuid}`,
      object: "chat.completion",
      created,
      model,
      choices: [{
        index: 0,
        message: { role: "assistant", content: reply },
        finish_reason: finish === "stop" || finish === "length" ? finish : null,
        logprobs: null,
        token_ids: lastIds
      }],
      usage: { prompt_tokens: 0, completion_tokens: completionTokens, total_tokens: completionTokens }
    },
    messages: line.messages,
    response_token_ids: complete(line.response_token_ids),
    response_loss_mask: complete(line.response_loss_mask),
    rollout_infos: { ...line.rollout_infos, end_reason: line.end_reason, error: line.error },
    rollout_logprobs: complete(line.rollout_logprobs),
    uuid: line.uuid
  }
}
