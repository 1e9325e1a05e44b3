/**
 * A replay of the HTTP calls ms-swift's GRPO trainer makes to its rollout server
 * (`swift rlhf --rlhf_type grpo --use_vllm true --vllm_mode server`), in order, with their bodies
 * serialized as Python's `requests` sends them (`json.dumps` defaults). Built from ms-swift at commit
 * 3602360a:
 *
 * 1. `VLLMInferClient.check_server` (swift/rlhf_trainers/vllm_client.py): `GET /health/` until 200.
 * 2. `RLHFArguments._init_external_vllm` (swift/arguments/rlhf_args.py): `close_communicator()`, then
 *    `init_communicator()`: `GET /get_world_size/`, `POST /init_communicator/ {"host": "0.0.0.0",
 *    "port": 51216, "world_size": W + 1}` (group port 51216 + server index).
 * 3. `RolloutTrainerMixin._prepare_vllm` (swift/rlhf_trainers/rollout_mixin.py), server mode:
 *    `POST /get_engine_type/`, `POST /reset_mm_cache/`.
 * 4. Each step whose `global_step` changed, `_move_model_to_vllm`: full weights
 *    (`_move_full_model_to_vllm` -> `_load_state_dict_to_vllm`, `enable_flattened_weight_sync` true by
 *    default): one `POST /update_flattened_params/ {"metadatas": [...]}` per bucket, then
 *    `POST /process_weights_after_loading/`; or LoRA (`_move_adapter_to_vllm` with the server's
 *    `enable_lora`): `GET /get_model_state_keys/` once, `POST /update_adapter_flattened_param/
 *    {"peft_config": {...}, "metadatas": [...]}`; then `_reset_vllm_cache`: `POST /reset_prefix_cache/`
 *    and (vLLM >= 0.16) `POST /reset_encoder_cache/`.
 * 5. `_engine_infer` -> `VLLMInferClient.infer`: `POST /infer/ {"infer_requests": [asdict(req)],
 *    "request_config": asdict(RequestConfig(...)), "metrics": null, "use_tqdm": false,
 *    "adapter_request": null}`: the request config of `_prepare_rollout_params`, with the trainer's
 *    defaults (`top_k -1`, `top_p 1.0`, `min_p 0.0`, `repetition_penalty 1.0`, `stop_words []`,
 *    `return_details` true, `logprobs` = `use_vllm`).
 * 6. At exit (`atexit`): `POST /close_communicator/`.
 *
 * The NCCL parts (the trainer joining the group at the backend's host, broadcasting tensors) do
 * not go through HTTP and are not replayed.
 */

/** Python's `json.dumps` with its defaults (`", "`, `": "`, ASCII only), as `requests.post(json=...)` sends. */
export const pyJson = (value: unknown): string => {
  if (value === null || value === undefined) return "null"
  if (value === true) return "true"
  if (value === false) return "false"
  if (typeof value === "number") return Number.isInteger(value) && !Object.is(value, -0) ? String(value) : pyFloat(value)
  if (typeof value === "string") {
    return JSON.stringify(value).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`)
  }
  if (Array.isArray(value)) return `[${value.map(pyJson).join(", ")}]`
  if (value instanceof PyFloat) return pyFloat(value.value)
  return `{${Object.entries(value as Record<string, unknown>).map(([k, v]) => `${pyJson(k)}: ${pyJson(v)}`).join(", ")}}`
}

/** A Python float (written `1.0`, not `1`). */
export class PyFloat {
  constructor(readonly value: number) {}
}
const pyFloat = (x: number): string => (Number.isInteger(x) ? `${x}.0` : String(x))
export const f = (x: number) => new PyFloat(x)

export interface Call {
  readonly method: "GET" | "POST"
  readonly path: string
  /** The body as the trainer's `requests` sends it; `undefined`: none. */
  readonly body?: string | undefined
  /** Where in ms-swift the call is made. */
  readonly from: string
}

/** `asdict(RolloutInferRequest(...))` as `OnPolicySample.to_infer_request` builds it (swift/rl_core/data.py). */
export const inferRequest = (
  uuid: string,
  dataDict: Record<string, unknown>,
  chatTemplateKwargs: Record<string, unknown> = {}
): Record<string, unknown> => ({
  messages: [{ role: "user", content: "<placeholder>" }],
  images: [],
  audios: [],
  videos: [],
  tools: null,
  objects: {},
  chat_template_kwargs: chatTemplateKwargs,
  data_dict: dataDict,
  uuid
})

/** `asdict(RequestConfig(...))` of `_prepare_rollout_params` with the trainer's default generation arguments. */
export const trainerRequestConfig = (maxCompletionLength: number, temperature: number) => ({
  max_tokens: maxCompletionLength,
  temperature: f(temperature),
  top_k: -1,
  top_p: f(1),
  min_p: f(0),
  repetition_penalty: f(1),
  num_beams: 1,
  stop: [],
  seed: null,
  stream: false,
  logprobs: true,
  top_logprobs: null,
  prompt_logprobs: null,
  n: 1,
  best_of: null,
  presence_penalty: f(0),
  frequency_penalty: f(0),
  length_penalty: f(1),
  return_details: true,
  structured_outputs_regex: null
})

/** The `/infer/` body of `VLLMInferClient.infer`. */
export const inferBody = (requests: ReadonlyArray<Record<string, unknown>>, requestConfig: Record<string, unknown>) =>
  pyJson({
    infer_requests: requests,
    request_config: requestConfig,
    metrics: null,
    use_tqdm: false,
    adapter_request: null
  })

/** One `FlattenedTensorMetadata.model_dump()`. */
const metadata = (name: string, shape: ReadonlyArray<number>, start: number) => {
  const numel = shape.reduce((a, b) => a * b, 1)
  return { name, shape, dtype: "torch.bfloat16", start_idx: start, end_idx: start + numel * 2, numel }
}

/** The start-up calls (steps 1-3). */
export const startup = (worldSize: number): Array<Call> => [
  { method: "GET", path: "/health/", from: "VLLMInferClient.check_server" },
  { method: "POST", path: "/close_communicator/", from: "RLHFArguments._init_external_vllm -> VLLMClient.close_communicator" },
  { method: "GET", path: "/get_world_size/", from: "VLLMClient.init_communicator" },
  {
    method: "POST",
    path: "/init_communicator/",
    body: pyJson({ host: "0.0.0.0", port: 51216, world_size: worldSize + 1 }),
    from: "VLLMClient.init_communicator"
  },
  { method: "POST", path: "/get_engine_type/", from: "RolloutTrainerMixin._prepare_vllm -> VLLMClient.get_engine_type" },
  { method: "POST", path: "/reset_mm_cache/", from: "RolloutTrainerMixin._prepare_vllm -> VLLMClient.reset_mm_cache" }
]

/** A full-weight sync (step 4), in two buckets. */
export const fullSync = (): Array<Call> => [
  {
    method: "POST",
    path: "/update_flattened_params/",
    body: pyJson({ metadatas: [metadata("model.embed_tokens.weight", [1024, 64], 0), metadata("model.norm.weight", [64], 131072)] }),
    from: "_load_state_dict_to_vllm -> _process_bucket_with_flattened_tensor -> VLLMClient.update_flattened_params"
  },
  {
    method: "POST",
    path: "/update_flattened_params/",
    body: pyJson({ metadatas: [metadata("lm_head.weight", [1024, 64], 0)] }),
    from: "_load_state_dict_to_vllm -> _process_bucket_with_flattened_tensor -> VLLMClient.update_flattened_params"
  },
  { method: "POST", path: "/process_weights_after_loading/", from: "_move_full_model_to_vllm -> VLLMClient.process_weights_after_loading" },
  { method: "POST", path: "/reset_prefix_cache/", from: "_reset_vllm_cache -> VLLMClient.reset_prefix_cache" },
  { method: "POST", path: "/reset_encoder_cache/", from: "_reset_vllm_cache -> VLLMClient.reset_encoder_cache (vLLM >= 0.16)" }
]

/** A LoRA sync (step 4, `rollout_enable_lora`). */
export const loraSync = (): Array<Call> => [
  { method: "GET", path: "/get_model_state_keys/", from: "_get_vllm_param_names_for_mapping -> VLLMClient.get_model_state_keys" },
  {
    method: "POST",
    path: "/update_adapter_flattened_param/",
    body: pyJson({
      peft_config: { r: 8, lora_alpha: 32, target_modules: ["q_proj", "v_proj"], lora_dropout: f(0.05), bias: "none" },
      metadatas: [metadata("base_model.model.layers.0.self_attn.q_proj.lora_A.weight", [8, 64], 0)]
    }),
    from: "_move_adapter_to_vllm -> VLLMClient.update_adapter_flattened_param"
  },
  { method: "POST", path: "/reset_prefix_cache/", from: "_reset_vllm_cache -> VLLMClient.reset_prefix_cache" },
  { method: "POST", path: "/reset_encoder_cache/", from: "_reset_vllm_cache -> VLLMClient.reset_encoder_cache (vLLM >= 0.16)" }
]

export const shutdown = (): Array<Call> => [
  { method: "POST", path: "/close_communicator/", from: "atexit -> VLLMClient.close_communicator" }
]

/** Sends one call as `requests` does: JSON content type with a body, none without. */
export const send = async (base: string, call: Call): Promise<{ status: number; text: string }> => {
  const init: RequestInit = { method: call.method }
  if (call.body !== undefined) {
    init.body = call.body
    init.headers = { "content-type": "application/json" }
  }
  const response = await fetch(`${base}${call.path}`, init)
  return { status: response.status, text: await response.text() }
}
