/**
 * Sampling parameters shared by the inference backends: range checks (so a bad value is one clear
 * error at startup, not a 400 from every request) and merging a backend's defaults with a call's
 * own parameters.
 *
 * @since 0.1.0
 */
import { Result } from "effect"
import type { Feature, SamplingParams } from "../Inference.js"
import { InferenceError } from "../Inference.js"
import * as RunSpec from "../RunSpec.js"

/**
 * A sampling value that no backend accepts, with the option that carries it.
 *
 * @since 0.1.0
 * @category models
 */
export interface Problem {
  readonly option: string
  readonly detail: string
}

/**
 * The problems of a set of sampling parameters (empty when all are usable), named as the command
 * line names them (`--temperature`): the run spec's checks (`RunSpec.Sampling`: the OpenAI API's
 * ranges, which vLLM, llama.cpp and Ollama accept too, and vLLM's for min_p and
 * repetition_penalty), written once there.
 *
 * @since 0.1.0
 * @category validation
 */
export const problems = (params: SamplingParams): Array<Problem> => RunSpec.samplingProblems(params, "flags")

/**
 * The optional features a call's parameters ask for (see `Inference.Feature`): a `top_k` limit, `min_p` above 0, a
 * `repetition_penalty` other than 1, a regex. Values that mean "no limit" ask for nothing.
 *
 * @since 0.2.0
 * @category validation
 */
export const features = (params: SamplingParams): Array<Feature> => {
  const out: Array<Feature> = []
  if (params.topK !== undefined && params.topK !== -1) out.push("topK")
  if (params.minP !== undefined && params.minP !== 0) out.push("minP")
  if (params.repetitionPenalty !== undefined && params.repetitionPenalty !== 1) out.push("repetitionPenalty")
  if (params.structuredOutputsRegex !== undefined) out.push("structuredOutputsRegex")
  return out
}

/**
 * The wire name of each feature, for messages.
 *
 * @since 0.2.0
 * @category validation
 */
export const FEATURE_NAMES: Readonly<Record<Feature, string>> = {
  topK: "top_k",
  minP: "min_p",
  repetitionPenalty: "repetition_penalty",
  structuredOutputsRegex: "structured_outputs_regex",
  chatTemplateKwargs: "chat_template_kwargs"
}

/**
 * The first feature a call asks for that a backend does not honour, or `undefined`.
 *
 * @since 0.2.0
 * @category validation
 */
export const unhonoured = (
  params: SamplingParams,
  honours: ReadonlySet<Feature> | undefined
): Feature | undefined => features(params).find((feature) => honours === undefined || !honours.has(feature))

/**
 * A backend's own guard: it fails a call that asks for a feature it does not honour, rather than
 * ignoring it.
 *
 * @since 0.2.0
 * @category validation
 */
export const requireHonoured = (
  backend: string,
  params: SamplingParams,
  honours: ReadonlySet<Feature> | undefined
): InferenceError | undefined => {
  const missing = unhonoured(params, honours)
  return missing === undefined ? undefined : new InferenceError({
    reason: "InvalidRequest",
    backend,
    detail: `${FEATURE_NAMES[missing]} is not supported by this backend`
  })
}

/**
 * Checks sampling parameters; the error names every bad value.
 *
 * @since 0.1.0
 * @category validation
 */
export const validate = (backend: string, params: SamplingParams): Result.Result<SamplingParams, InferenceError> => {
  const found = problems(params)
  return found.length === 0 ? Result.succeed(params) : Result.fail(
    new InferenceError({
      reason: "InvalidRequest",
      backend,
      detail: `bad sampling parameters: ${found.map((p) => `${p.option} ${p.detail}`).join("; ")}`
    })
  )
}

/**
 * A backend's check of each call's sampling: its defaults merged with the call's parameters, each
 * distinct object checked once (the sampling objects of a run are shared by all its calls).
 *
 * @since 0.1.0
 * @category validation
 */
export const checker = (backend: string, defaults: SamplingParams) => {
  const checked = new WeakSet<SamplingParams>()
  return (call: SamplingParams): Result.Result<SamplingParams, InferenceError> => {
    const sampling = merge(defaults, call)
    if (checked.has(sampling)) return Result.succeed(sampling)
    const valid = validate(backend, sampling)
    if (Result.isSuccess(valid)) checked.add(sampling)
    return valid
  }
}

/**
 * Whether no parameter is set.
 *
 * @since 0.1.0
 * @category validation
 */
export const isEmpty = (params: SamplingParams): boolean => {
  for (const value of Object.values(params)) if (value !== undefined) return false
  return true
}

/**
 * A call's parameters over a backend's defaults: each field the call sets wins. When either side
 * sets nothing the other is returned as is, so a run's one shared object stays one object.
 *
 * @since 0.1.0
 * @category combinators
 */
export const merge = (defaults: SamplingParams, call: SamplingParams): SamplingParams => {
  if (defaults === call || isEmpty(defaults)) return call
  if (isEmpty(call)) return defaults
  const out: Record<string, unknown> = { ...defaults }
  for (const [key, value] of Object.entries(call)) if (value !== undefined) out[key] = value
  return out as SamplingParams
}
