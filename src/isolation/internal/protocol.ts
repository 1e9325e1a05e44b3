/**
 * The requests between the main thread and an env worker, as `Schema.TaggedRequest`s for
 * `@effect/platform`'s serialized `Worker` / `WorkerRunner`.
 *
 * Env data (messages, infos, observations) is passed as it is (`Schema.Any`): structured clone
 * copies it, and the env contract does not constrain its shape further. A step sends only the
 * messages the worker has not seen yet (`from` is how many of the conversation it already holds).
 */
import { Schema } from "effect"
import * as Env from "../../Env.js"

/** Sent once when a worker starts: the plugins to load (paths), in order, on top of the built-ins. */
export class InitialMessage extends Schema.TaggedRequest<InitialMessage>()("InitialMessage", {
  failure: Schema.String,
  success: Schema.Void,
  payload: { plugins: Schema.Array(Schema.String) }
}) {}

/** The live env's OpenEnv view, read after each reset and step (only for envs that carry one). */
export const View = Schema.Struct({ observation: Schema.Any, state: Schema.Any })

/** A reset or step result and the view after it. */
export const Outcome = Schema.Struct({ result: Schema.Any, view: Schema.optional(View) })

/** Creates env `id` (a number chosen by the main thread) from a registered name and its config. */
export class Create extends Schema.TaggedRequest<Create>()("Create", {
  failure: Env.EnvError,
  success: Schema.Void,
  payload: { id: Schema.Number, env: Schema.String, config: Schema.Any }
}) {}

export class Reset extends Schema.TaggedRequest<Reset>()("Reset", {
  failure: Env.EnvError,
  success: Outcome,
  payload: { id: Schema.Number, request: Schema.Any }
}) {}

/** `messages` are the conversation's messages from index `from` on; the worker holds the rest. */
export class Step extends Schema.TaggedRequest<Step>()("Step", {
  failure: Env.EnvError,
  success: Outcome,
  payload: { id: Schema.Number, from: Schema.Number, messages: Schema.Any }
}) {}

/** Closes env `id` (its scope: the env's own close runs there). */
export class Close extends Schema.TaggedRequest<Close>()("Close", {
  failure: Schema.Never,
  success: Schema.Void,
  payload: { id: Schema.Number }
}) {}

export const Request = Schema.Union(InitialMessage, Create, Reset, Step, Close)
export type Request = typeof Request.Type
