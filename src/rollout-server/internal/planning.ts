/**
 * Planning a request: every row decoded and prepared (env known, `env_config` accepted, sampling in
 * range) before anything runs, with errors that name the field; then rows that run alike grouped,
 * so each group of them is one `Rollout` run.
 */
import { Result } from "effect"
import { randomUUID } from "node:crypto"
import type { Feature, SamplingParams } from "../../Inference.js"
import * as Sampling from "../../inference/Sampling.js"
import * as Json from "../../internal/Json.js"
import type * as Registry from "../../Registry.js"
import * as Rollout from "../../Rollout.js"
import * as Row from "../../Row.js"
import type * as Tool from "../../Tool.js"
import * as Api from "../Api.js"
import { ApiError } from "./http.js"
import { decodeToolChoice, decodeTools } from "./tools.js"

/** One row of a request, checked, with how it runs. */
export interface PlannedRow {
  readonly row: Row.Row
  /** The row checked against the batch's config, run as it is. */
  readonly prepared: Rollout.PreparedRow
  readonly uuid: string
  readonly numGenerations: number
  readonly maxTurns: number
  readonly sampling: SamplingParams | undefined
  /** Variables of the model's chat template for this row's calls (an `/infer/` request's own). */
  readonly chatTemplateKwargs?: Readonly<Record<string, unknown>> | undefined
  /** Tools the request offers on every call of this row's trajectories (next to the env's own). */
  readonly tools?: ReadonlyArray<Tool.Spec> | undefined
  readonly toolChoice?: Tool.Choice | undefined
}

export interface Plan {
  readonly rows: ReadonlyArray<PlannedRow>
  /** The config the rows were prepared with (the batch's seed). */
  readonly config: Rollout.Config
  readonly trajectories: number
  /** `/infer/`'s `return_details`: the last turn's token ids and prompt in `response`. */
  readonly returnDetails?: boolean | undefined
  /** `/infer/`'s `logprobs: true`: a request answered without them is refused. */
  readonly logprobs?: boolean | undefined
}

/** What a request gives about one row, in the server's terms. */
export interface RowInput {
  readonly prefix: string
  readonly messages: ReadonlyArray<{ readonly role: string; readonly content: string }> | null | undefined
  readonly envConfig: Readonly<Record<string, unknown>> | null | undefined
  readonly dataDict: Readonly<Record<string, unknown>> | null | undefined
  readonly uuid: string | null | undefined
  readonly numGenerations: number | null | undefined
  readonly maxTurns: number | null | undefined
}

/** What the server plans with: its registry, its defaults, and the run config of a batch seed. */
export interface Planner {
  readonly registry: Registry.Registry
  readonly numGenerations: number
  readonly maxTurns: number
  readonly seed: number
  readonly baseConfig: (batchSeed: number) => Rollout.Config
  /** The optional features the backend honours (a request asking for another is a 400). */
  readonly honours: ReadonlySet<Feature> | undefined
  /** The backend, for messages. */
  readonly backend: string
}

export const samplingProblem = (
  planner: Pick<Planner, "honours" | "backend">,
  path: string,
  overrides: SamplingParams
): ApiError | undefined => {
  const problem = Sampling.problems(overrides)[0]
  if (problem !== undefined) {
    return new ApiError({
      reason: "InvalidBody",
      path: `${path}.${Api.SAMPLING_FIELDS[problem.option] ?? problem.option}`,
      detail: problem.detail
    })
  }
  const missing = Sampling.unhonoured(overrides, planner.honours)
  return missing === undefined ? undefined : unsupported(planner, `${path}.${Sampling.FEATURE_NAMES[missing]}`)
}

/** A field this server's backend cannot honour: a 400 naming it, never silently ignored. */
export const unsupported = (planner: Pick<Planner, "backend">, path: string): ApiError =>
  new ApiError({
    reason: "InvalidBody",
    path,
    detail: `not supported by this server's inference backend (${planner.backend}); it would be ignored, so it is ` +
      "refused (--mode swift-rollout honours every RequestConfig field but n > 1, beams, streaming, top_logprobs " +
      "and prompt_logprobs)"
  })

export const planRow = (
  planner: Planner,
  config: Rollout.Config,
  index: number,
  input: RowInput
): Result.Result<PlannedRow, ApiError> => {
  const invalid = (path: string, detail: string, registeredEnvs?: ReadonlyArray<string>) =>
    Result.fail(new ApiError({ reason: "InvalidBody", path: `${input.prefix}${path}`, detail, registeredEnvs }))
  const dataDict = input.dataDict ?? {}
  const fromData = input.envConfig === null || input.envConfig === undefined
  if (!fromData && Object.prototype.hasOwnProperty.call(dataDict, "env_config")) {
    return invalid(".env_config", "give env_config or data_dict.env_config, not both")
  }
  const value: Record<string, unknown> = { ...dataDict }
  if (!fromData) value.env_config = input.envConfig
  if (input.messages !== null && input.messages !== undefined) value.messages = input.messages
  // Where env_config came from, for the paths of its errors.
  const at = (path: string) =>
    path === "" ? "" : `.${fromData && path.startsWith("env_config") ? `data_dict.${path}` : path}`
  const decoded = Row.decodeValue("request", index, value)
  if (Result.isFailure(decoded)) return invalid(at(decoded.failure.path), decoded.failure.detail)
  const prepared = Rollout.prepareRow(config, decoded.success)
  if (Result.isFailure(prepared)) {
    const error = prepared.failure
    const unknownEnv = error.path === "--env" || error.path === "env_config.name"
    return invalid(
      at(unknownEnv ? "env_config.name" : error.path),
      error.detail,
      unknownEnv ? [...planner.registry.envs.keys()].sort() : undefined
    )
  }
  return Result.succeed({
    row: decoded.success,
    prepared: prepared.success,
    uuid: input.uuid ?? randomUUID(),
    numGenerations: input.numGenerations ?? planner.numGenerations,
    maxTurns: input.maxTurns ?? planner.maxTurns,
    sampling: undefined
  })
}

/** A request's `tools` and `tool_choice`, checked (at `prefix`), as a planned row's fields. */
export const toolsOf = (
  prefix: string,
  request: { readonly tools?: ReadonlyArray<unknown> | null | undefined; readonly tool_choice?: unknown }
): Result.Result<Pick<PlannedRow, "tools" | "toolChoice">, ApiError> =>
  Result.flatMap(decodeTools(request.tools, `${prefix}.tools`), (tools) =>
    Result.map(
      decodeToolChoice(request.tool_choice, tools, `${prefix}.tool_choice`),
      (toolChoice) => (tools === undefined ? {} : { tools, toolChoice })
    ))

/** A `POST /v1/rollouts` batch, every row checked. */
export const planBatch = (planner: Planner, batch: Api.RolloutBatch): Result.Result<Plan, ApiError> => {
  const config = planner.baseConfig(batch.seed ?? planner.seed)
  const batchSampling = Api.toSamplingParams(batch.sampling)
  const bad = samplingProblem(planner, "sampling", batchSampling)
  if (bad !== undefined) return Result.fail(bad)
  const rows: Array<PlannedRow> = []
  let trajectories = 0
  for (let i = 0; i < batch.requests.length; i++) {
    const r = batch.requests[i]
    const planned = planRow(planner, config, i, {
      prefix: `requests[${i}]`,
      messages: r.messages,
      envConfig: r.env_config,
      dataDict: r.data_dict,
      uuid: r.uuid,
      numGenerations: r.num_generations,
      maxTurns: r.max_turns
    })
    if (Result.isFailure(planned)) return Result.fail(planned.failure)
    const rowSampling = Api.toSamplingParams(r.sampling)
    const badRow = samplingProblem(planner, `requests[${i}].sampling`, rowSampling)
    if (badRow !== undefined) return Result.fail(badRow)
    const tools = toolsOf(`requests[${i}]`, r)
    if (Result.isFailure(tools)) return Result.fail(tools.failure)
    rows.push({ ...planned.success, sampling: Sampling.merge(batchSampling, rowSampling), ...tools.success })
    trajectories += planned.success.numGenerations
  }
  return Result.succeed({ rows, config, trajectories })
}

/** Rows of a plan that run alike (generations, turns, sampling, tools): one `Rollout` run each. */
export interface RunGroup {
  readonly config: Rollout.Config
  readonly rows: Array<Result.Result<Rollout.PreparedRow, Row.RowError>>
  trajectories: number
  /** The tools the rows' requests offer (their calls go to the backend with them). */
  readonly tools: ReadonlyArray<Tool.Spec> | undefined
  readonly toolChoice: Tool.Choice | undefined
}

/** The plan's rows grouped by how they run, with the server's sampling under each row's. */
export const runGroups = (plan: Plan, serverSampling: SamplingParams): Array<RunGroup> => {
  const groups = new Map<string, RunGroup>()
  for (const planned of plan.rows) {
    const sampling = Sampling.merge(serverSampling, planned.sampling ?? {})
    const kwargs = planned.chatTemplateKwargs
    const key = `${planned.numGenerations}|${planned.maxTurns}|${Json.stringify(sampling)}|${
      kwargs === undefined ? "" : Json.stringify(kwargs)
    }|${planned.tools === undefined ? "" : Json.stringify([planned.tools, planned.toolChoice ?? null])}`
    let group = groups.get(key)
    if (group === undefined) {
      group = {
        config: {
          ...plan.config,
          numGenerations: planned.numGenerations,
          maxTurns: planned.maxTurns,
          sampling: Sampling.isEmpty(sampling) ? undefined : sampling,
          chatTemplateKwargs: kwargs
        },
        rows: [],
        trajectories: 0,
        tools: planned.tools,
        toolChoice: planned.toolChoice
      }
      groups.set(key, group)
    }
    group.rows.push(Result.succeed(planned.prepared))
    group.trajectories += planned.numGenerations
  }
  return [...groups.values()]
}
