/**
 * The reference trainer's control endpoints (ms-swift's `swift rollout`, in its client's call
 * order: `/get_world_size/`, `/init_communicator/`, the weight updates,
 * `/process_weights_after_loading/`, the cache resets, `/get_model_state_keys/`,
 * `/close_communicator/`), and the policy version.
 *
 * - With a `swift rollout` backend (`--mode swift-rollout`) each is forwarded to it unchanged (method,
 *   path, body) and its answer passed back as it is: the trainer's NCCL group then joins the
 *   backend's vLLM workers directly, and weights travel between them, not through this server.
 * - With a backend that has no weights to sync (scripted, an OpenAI-compatible server, colocate)
 *   each answers 501 saying why, so the trainer stops at start with that message.
 * - `/get_engine_type/` is answered here: this server runs the multi-turn gym loop
 *   (`enable_multi_turn`, `use_gym_env` true), on an async engine; `enable_lora` is the backend's.
 * - The policy version: `POST /v1/policy-version {"version": N}` sets it; a forwarded weight update
 *   (any weight endpoint, then `/reset_prefix_cache/`, which the trainer calls once at the end of
 *   every sync) adds one. Every model call is stamped with the version current when it was sent.
 */
import { Effect, Schema } from "effect"
import { HttpRouter, HttpServerRequest, HttpServerResponse } from "effect/http"
import type { Service as InferenceService } from "../../Inference.js"
import type * as SwiftRollout from "../../inference/SwiftRollout.js"
import { isWhole } from "../../internal/whole.js"
import { ApiError, decodeBody, json, readBody } from "./http.js"

/**
 * The reference's control endpoints this server forwards: `weights` marks those that change the
 * backend's weights, `reset` the one that ends a sync.
 */
export const FORWARDED: ReadonlyArray<{
  readonly method: "GET" | "POST"
  readonly path: `/${string}`
  readonly weights?: true
  readonly reset?: true
}> = [
  { method: "GET", path: "/get_world_size/" },
  { method: "GET", path: "/get_model_state_keys/" },
  { method: "POST", path: "/init_communicator/" },
  { method: "POST", path: "/update_named_param/", weights: true },
  { method: "POST", path: "/update_adapter_flattened_param/", weights: true },
  { method: "POST", path: "/update_adapter_param/", weights: true },
  { method: "POST", path: "/update_flattened_params/", weights: true },
  { method: "POST", path: "/process_weights_after_loading/", weights: true },
  { method: "POST", path: "/reset_prefix_cache/", reset: true },
  { method: "POST", path: "/reset_encoder_cache/" },
  { method: "POST", path: "/reset_mm_cache/" },
  { method: "POST", path: "/close_communicator/" }
]

/**
 * The version of the policy's weights, and the turns sampled under each version.
 *
 * @since 0.2.0
 * @category models
 */
export class PolicyVersion {
  version = 0
  /** Whether turns are stamped: from the first version set, or from the start with a backend whose weights are synced. */
  active: boolean
  /** A weight update was forwarded and its sync has not ended yet. */
  private changing = false
  /** Turns per version, over every request so far. */
  readonly seen: Record<string, number> = {}
  updatedAt: number | undefined = undefined

  constructor(active: boolean) {
    this.active = active
  }

  set(version: number): { readonly version: number; readonly previous: number } {
    const previous = this.version
    this.version = version
    this.active = true
    this.changing = false
    this.updatedAt = Date.now()
    return { version, previous }
  }

  weightsChanged(): void {
    this.changing = true
  }

  /** The end of a sync: the weights the next calls see are the next version. */
  syncEnded(): void {
    if (!this.changing) return
    this.set(this.version + 1)
  }

  toJson() {
    return {
      version: this.version,
      versioned: this.active,
      updated_at: this.updatedAt === undefined ? null : new Date(this.updatedAt).toISOString(),
      turns_by_version: { ...this.seen }
    }
  }
}

/**
 * The service with each completion stamped with the version current when its call was sent (the
 * older weights, when an update lands during the call: a conservative age for dropping stale samples).
 */
export const stamped = (service: InferenceService, policy: PolicyVersion): InferenceService => ({
  ...service,
  chat: (request) => {
    if (!policy.active) return service.chat(request)
    const version = policy.version
    return Effect.map(service.chat(request), (completion) => ({ ...completion, policyVersion: version }))
  }
})

const PolicyVersionBody = Schema.Struct({
  version: Schema.Int.check(Schema.makeFilter((n) => isWhole(n, 0) || "expected a whole number >= 0"))
})
const decodePolicyVersion = decodeBody(PolicyVersionBody, { excess: "error" })

export interface ControlContext {
  readonly control: SwiftRollout.Control | undefined
  readonly policy: PolicyVersion
  readonly maxBody: number
  /** Why there is nothing to forward to, for the 501 (the mode and backend). */
  readonly backend: { readonly mode: string; readonly name: string }
}

const encoder = new TextEncoder()

const whyNot = (context: ControlContext, method: string, path: string): string => {
  const { mode, name } = context.backend
  const why = mode === "server"
    ? `the OpenAI-compatible server behind it (${name}) has no weight-sync endpoints: update its weights yourself ` +
      "(and POST /v1/policy-version), or serve a `swift rollout` backend with --mode swift-rollout"
    : mode === "colocate"
    ? `its model runs in this process from a GGUF file (${name}): weights cannot be synced into it`
    : `its backend (${name}, --mode ${mode}) has no model weights to update`
  return `${method} ${path} is one of the reference rollout server's weight-sync endpoints: this server cannot take ` +
    `it, because ${why}. A trainer that syncs weights (swift rlhf --vllm_mode server) needs ` +
    "effect-gym serve --mode swift-rollout --base-url <swift rollout server>"
}

const forwardTo = (context: ControlContext, route: (typeof FORWARDED)[number]) =>
  Effect.gen(function*() {
    const control = context.control
    if (control === undefined) {
      return yield* new ApiError({ reason: "NotSupported", detail: whyNot(context, route.method, route.path) })
    }
    const request = yield* HttpServerRequest.HttpServerRequest
    const body = route.method === "GET" ? "" : yield* readBody(request, context.maxBody)
    const answer = yield* control.forward({
      method: route.method,
      path: route.path,
      body: encoder.encode(body),
      contentType: request.headers["content-type"]
    }).pipe(
      Effect.mapError((error) =>
        new ApiError({
          reason: "Upstream",
          detail: `${route.method} ${route.path} could not be forwarded to ${control.name}: ${error.detail}`,
          cause: error
        })
      )
    )
    if (answer.status >= 200 && answer.status < 300) {
      if (route.weights === true) context.policy.weightsChanged()
      if (route.reset === true) context.policy.syncEnded()
    }
    return HttpServerResponse.uint8Array(answer.body, {
      status: answer.status,
      ...(answer.contentType === undefined ? {} : { contentType: answer.contentType })
    })
  })

const engineType = (context: ControlContext) =>
  Effect.sync(() =>
    json({
      // This server drives its trajectories concurrently, as the reference's async engine does.
      engine_type: "AsyncLLMEngine",
      enable_multi_turn: true,
      use_gym_env: true,
      enable_lora: context.control?.engine?.enable_lora ?? false
    })
  )

const policyVersion = (context: ControlContext) =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const body = yield* Effect.flatMap(readBody(request, context.maxBody), (text) => Effect.fromResult(decodePolicyVersion(text)))
    return json(context.policy.set(body.version))
  })

/**
 * The control routes, for the server's router.
 *
 * @since 0.2.0
 */
export const routes = (context: ControlContext): Array<HttpRouter.Route<ApiError>> => [
  // The router ignores a trailing slash: these are also reached without it.
  HttpRouter.route("POST", "/get_engine_type/", engineType(context)),
  HttpRouter.route("GET", "/v1/policy-version", Effect.sync(() => json(context.policy.toJson()))),
  HttpRouter.route("POST", "/v1/policy-version", policyVersion(context)),
  ...FORWARDED.map((route) => HttpRouter.route(route.method, route.path, forwardTo(context, route)))
]

/** The paths, for the 404's list. */
export const PATHS = [
  "POST /get_engine_type/",
  "GET|POST /v1/policy-version",
  ...FORWARDED.map((route) => `${route.method} ${route.path}`)
]
