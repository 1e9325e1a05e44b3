/**
 * Named in-process policies: `Inference` services made from options, selected with `--policy`.
 * The built-in ones are scripted (no model); plugins may add more.
 *
 * @since 0.1.0
 */
import { Effect, Layer, Result, Schema, SchemaParser } from "effect"
import type * as Scope from "effect/Scope"
import { Inference, type Service } from "./Inference.js"
import * as Issue from "./internal/issue.js"
import type { Naming } from "./RunSpec.js"

/**
 * Options given to a policy that it cannot use. Its message names the option as `naming` spells it:
 * `option epsilon` for {@link layer}'s options in a library program (`"fields"`), `--policy-option
 * epsilon` on the command line (`"flags"`, also when absent: a policy's `make` does not know who
 * called it; {@link layer} sets it).
 *
 * @since 0.1.0
 * @category errors
 */
export class PolicyConfigError extends Schema.TaggedError<PolicyConfigError>()(
  "PolicyConfigError",
  {
    policy: Schema.String,
    path: Schema.String,
    detail: Schema.String,
    naming: Schema.optionalKey(Schema.Literals(["fields", "flags"]))
  }
) {
  override get message(): string {
    const option = this.naming === "fields" ? "option" : "--policy-option"
    return `${option} ${this.path}: ${this.detail} (policy ${this.policy})`
  }
}

/**
 * @since 0.1.0
 * @category models
 */
export interface Definition {
  readonly name: string
  readonly description: string
  readonly make: (options: Readonly<Record<string, unknown>>) => Effect.Effect<Service, PolicyConfigError, Scope.Scope>
}

/**
 * A policy with options decoded by a schema (values from the command line arrive as strings).
 *
 * @since 0.1.0
 * @category constructors
 */
export const define = <A, I>(options: {
  readonly name: string
  readonly description?: string | undefined
  readonly options: Schema.Codec<A, I>
  readonly make: (options: A) => Effect.Effect<Service, PolicyConfigError, Scope.Scope>
}): Definition => {
  const decode = SchemaParser.decodeUnknownResult(options.options, { ...Issue.parseOptions, onExcessProperty: "error" })
  return {
    name: options.name,
    description: options.description ?? "",
    make: (raw) =>
      Result.match(decode(raw), {
        onFailure: (issue) => {
          const first = Issue.first(issue)
          return Effect.fail(
            new PolicyConfigError({
              policy: options.name,
              path: first.path.map(String).join("."),
              detail: first.message
            })
          )
        },
        onSuccess: (decoded) => Effect.map(options.make(decoded), (service): Service => ({ ...service, scripted: true }))
      })
  }
}

/**
 * The `Inference` layer of a policy made with `options` (values as the command line gives them:
 * strings are decoded by the policy's schema). Options the policy cannot use fail the layer with a
 * {@link PolicyConfigError}; resources the policy acquires are released when the layer's scope
 * closes.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Policy, ScriptedPolicies } from "effect-gym"
 *
 * const program = Effect.void // a run that needs `Inference`
 * program.pipe(Effect.provide(Policy.layer(ScriptedPolicies.frozenLakeSolver, { epsilon: 0.3 })))
 * ```
 *
 * @since 0.3.0
 * @category layers
 */
export const layer = (
  definition: Definition,
  options: Readonly<Record<string, unknown>> = {},
  /** How a bad option is named: `"fields"` (`option epsilon`), or `"flags"` (`--policy-option epsilon`) for a command line. */
  naming: Naming = "fields"
): Layer.Layer<Inference, PolicyConfigError> =>
  Layer.effect(
    Inference,
    Effect.mapError(definition.make(options), (error) =>
      error._tag !== "PolicyConfigError" || error.naming === naming
        ? error
        : new PolicyConfigError({ policy: error.policy, path: error.path, detail: error.detail, naming }))
  )
