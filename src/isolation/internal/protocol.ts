/**
 * The requests between the main thread and an env worker: an `effect/rpc` group, served in the
 * worker over `RpcServer.layerProtocolWorkerRunner` and called from the main thread over
 * `RpcClient.layerProtocolWorker`.
 *
 * Env data (messages, infos, observations) is passed as it is (`Schema.Any`): structured clone
 * copies it, and the env contract does not constrain its shape further. A step sends only the
 * messages the worker has not seen yet (`from` is how many of the conversation it already holds).
 */
import { Schema } from "effect"
import { Rpc, RpcGroup } from "effect/rpc"
import * as Env from "../../Env.js"

/** Sent once when a worker starts: the plugins to load (paths), in order, on top of the built-ins. */
export const Init = Rpc.make("Init", {
  payload: { plugins: Schema.Array(Schema.String) },
  error: Schema.String
})

/** The live env's OpenEnv view, read after each reset and step (only for envs that carry one). */
export const View = Schema.Struct({ observation: Schema.Any, state: Schema.Any })

/** A reset or step result and the view after it. */
export const Outcome = Schema.Struct({ result: Schema.Any, view: Schema.optional(View) })

/** Creates env `id` (a number chosen by the main thread) from a registered name and its config. */
export const Create = Rpc.make("Create", {
  payload: { id: Schema.Number, env: Schema.String, config: Schema.Any },
  error: Env.EnvError
})

export const Reset = Rpc.make("Reset", {
  payload: { id: Schema.Number, request: Schema.Any },
  success: Outcome,
  error: Env.EnvError
})

/** `messages` are the conversation's messages from index `from` on; the worker holds the rest. */
export const Step = Rpc.make("Step", {
  payload: { id: Schema.Number, from: Schema.Number, messages: Schema.Any },
  success: Outcome,
  error: Env.EnvError
})

/** Closes env `id` (its scope: the env's own close runs there). */
export const Close = Rpc.make("Close", { payload: { id: Schema.Number } })

export class Requests extends RpcGroup.make(Init, Create, Reset, Step, Close) {}
