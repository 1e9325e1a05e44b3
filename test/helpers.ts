import { type Duration, Effect, Exit, Layer, Result } from "effect"
import * as Builtins from "../src/Builtins.js"
import * as Env from "../src/Env.js"
import * as Inference from "../src/Inference.js"
import type * as Message from "../src/Message.js"
import * as Registry from "../src/Registry.js"
import * as Reward from "../src/Reward.js"
import * as Rollout from "../src/Rollout.js"
import * as Row from "../src/Row.js"
import * as Scheduler from "../src/Scheduler.js"
import type * as Tool from "../src/Tool.js"
import { frozenLakeSolver, random } from "../src/inference/Scripted.js"

/** Counts env lifecycles: every `created` must be matched by exactly one `closed`. */
export class Counters {
  created = 0
  closed = 0
  resets = 0
  steps = 0
  readonly closedIds = new Map<number, number>()
  get open(): number {
    return this.created - this.closed
  }
}

/**
 * An env named "ready" whose reset and steps answer with completed Effects (the trajectory loop's
 * fast path), done after `doneAt` steps; `counters` counts the envs created and closed.
 */
export const readyEnv = (counters: Counters, doneAt: number, observation = (turn: number) => `t${turn}`) =>
  Env.define({
    name: "ready",
    make: () =>
      Effect.map(
        Effect.acquireRelease(Effect.sync(() => ++counters.created), () => Effect.sync(() => void counters.closed++)),
        (): Env.Env => {
          let turn = 0
          return {
            reset: () => Effect.succeed({ observation: "start", info: {} }),
            step: () => Effect.succeed({ observation: observation(++turn), reward: 0, done: turn >= doneAt, info: {} })
          }
        }
      )
  })

/**
 * A test env with fault injection from env_config:
 * - `fail`: "create" | "reset" | "step" | "throw_step" | "nan" | "die_step": fail there (at turn `at`, default 1)
 * - `length`: turns until done (default 3), reward 1 on the last turn
 * - `hang_at`: a step that never returns (until interrupted)
 */
export const countingEnv = (counters: Counters, name = "counting"): Env.Definition =>
  Env.define({
    name,
    description: "test env with fault injection",
    make: (config) =>
      Effect.gen(function*() {
        if (config.fail === "create") {
          return yield* new Env.EnvError({ env: name, phase: "create", detail: "injected create failure" })
        }
        const id = yield* Effect.acquireRelease(
          Effect.sync(() => ++counters.created),
          (id) =>
            Effect.sync(() => {
              counters.closed++
              counters.closedIds.set(id, (counters.closedIds.get(id) ?? 0) + 1)
            })
        )
        const length = typeof config.length === "number" ? config.length : 3
        const at = typeof config.at === "number" ? config.at : 1
        let turn = 0
        return {
          reset: () =>
            Effect.suspend((): Effect.Effect<Env.ResetResult, Env.EnvError> => {
              counters.resets++
              if (config.fail === "reset") {
                return Effect.fail(new Env.EnvError({ env: name, phase: "reset", detail: "injected reset failure" }))
              }
              return Effect.succeed({ observation: `start ${id}`, info: { id }, systemPrompt: "be brief" })
            }),
          step: (messages) =>
            Effect.suspend((): Effect.Effect<Env.StepResult, Env.EnvError> => {
              counters.steps++
              turn++
              if (config.hang_at === turn) return Effect.never
              if (turn === at) {
                if (config.fail === "step") {
                  return Effect.fail(new Env.EnvError({ env: name, phase: "step", detail: "injected step failure" }))
                }
                if (config.fail === "die_step") return Effect.die(new Error("injected defect"))
                if (config.fail === "nan") {
                  return Effect.succeed({ observation: "x", reward: NaN, done: false, info: {} })
                }
              }
              const done = turn >= length
              return Effect.succeed({
                observation: `obs ${turn} after ${messages[messages.length - 1].content}`,
                reward: done ? 1 : 0.25,
                done,
                info: { turn }
              })
            })
        }
      })
  })

/** A policy that echoes the turn; fails at `failTurn` of trajectories whose id is in `failIds`. */
export const echoPolicy = (options: { readonly failIds?: ReadonlySet<string>; readonly failTurn?: number } = {}) =>
  Inference.layerFunction("echo", (request) =>
    options.failIds?.has(request.trajectoryId) && request.turn === (options.failTurn ?? 1)
      ? Effect.fail(new Inference.InferenceError({ reason: "ServerError", backend: "echo", detail: "injected", status: 500 }))
      : Effect.succeed({ text: `reply ${request.turn}`, finishReason: "stop" as const }))

export const randomPolicy = (options: Record<string, unknown> = {}): Layer.Layer<Inference.Inference> =>
  Layer.effect(Inference.Inference, Effect.orDie(random.make(options)))

export const solverPolicy = (options: Record<string, unknown> = {}): Layer.Layer<Inference.Inference> =>
  Layer.effect(Inference.Inference, Effect.orDie(frozenLakeSolver.make(options)))

/** Rows from plain objects (as parsed JSON lines). */
export const rows = (values: ReadonlyArray<unknown>): Array<Result.Result<Row.Row, Row.RowError>> =>
  values.map((value, index) => Row.decodeValue("test.jsonl", index, value))

/** A run config with the gym scheduler; `registry` defaults to the built-ins plus `extraEnvs`. */
export const runConfig = (options: {
  readonly envs?: ReadonlyArray<Env.Definition>
  readonly defaultEnv?: string
  readonly numGenerations?: number
  readonly maxTurns?: number
  readonly concurrency?: number
  readonly seed?: number
  readonly rewards?: ReadonlyArray<Reward.Definition>
  readonly weights?: ReadonlyArray<number>
  readonly scheduler?: Scheduler.Definition
  readonly schedulerOptions?: Record<string, unknown>
}) =>
  Effect.gen(function*() {
    const registry = Registry.add(Builtins.registry, { envs: options.envs ?? [] })
    const definition = options.scheduler ?? Scheduler.gym
    const instance = yield* definition.make({ options: options.schedulerOptions ?? {} })
    const columns = Result.getOrThrow(Reward.columns(options.rewards ?? [], options.weights))
    const config: Rollout.Config = {
      registry,
      scheduler: { definition, instance },
      defaultEnv: options.defaultEnv,
      numGenerations: options.numGenerations ?? 4,
      maxTurns: options.maxTurns ?? 10,
      concurrency: options.concurrency ?? 8,
      seed: options.seed ?? 0,
      columns
    }
    return config
  })

/** A result or completions line without its timings (wall-clock measurements, the only field that differs between two runs of the same rows). */
export const withoutTimings = <A extends object>(line: A): Omit<A, "timings"> => {
  const { timings: _timings, ...rest } = line as A & { readonly timings?: unknown }
  return rest
}

/** Waits (up to `ms`, looking every `every`) until `done()`; says whether it happened. */
export const eventually = (done: () => boolean, ms = 5000, every: Duration.Input = "5 millis") =>
  Effect.gen(function*() {
    const deadline = Date.now() + ms
    while (!done() && Date.now() < deadline) yield* Effect.sleep(every)
    return done()
  })

/** The `InferenceError` an exit failed with (throws when it succeeded or failed otherwise). */
export const inferenceFailure = <A>(exit: Exit.Exit<A, Inference.InferenceError>): Inference.InferenceError => {
  if (Exit.isSuccess(exit)) throw new Error(`expected a failure, got ${JSON.stringify(exit.value)}`)
  const reasons = exit.cause.reasons
  const error = reasons.length === 1 && reasons[0]._tag === "Fail" ? reasons[0].error : undefined
  if (!(error instanceof Inference.InferenceError)) throw new Error(`expected an InferenceError, got ${exit.cause}`)
  return error
}

/** Every trajectory record of a run's items, sorted by (row, generation). */
export const records = (items: ReadonlyArray<Rollout.Item>): Array<Rollout.TrajectoryRecord> =>
  items
    .flatMap((item) => (item._tag === "Group" ? item.records : []))
    .sort((a, b) => a.result.row - b.result.row || a.result.generation - b.result.generation)

/**
 * A hand-built record of one finished turn (`reward` as its env total, `rewards` its columns), with
 * `over` in its result: what a user of the log's encoder may hand it.
 */
export const oneTurnRecord = (
  options: {
    readonly generation?: number
    readonly reward?: number
    readonly rewards?: Readonly<Record<string, number>>
    readonly envConfig?: unknown
  } = {},
  over: Record<string, unknown> = {}
): Rollout.TrajectoryRecord => {
  const generation = options.generation ?? 0
  const reward = options.reward ?? 1
  return {
    row: { index: 0, envConfig: options.envConfig ?? {}, messages: [], dataDict: {} },
    rewards: options.rewards,
    reward,
    advantage: 0,
    error: undefined,
    result: {
      id: `r0-g${generation}`,
      row: 0,
      generation,
      env: "e",
      messages: [{ role: "user", content: "hi" }],
      totalReward: reward,
      stepRewards: [reward],
      numTurns: 1,
      resetInfo: {},
      stepInfos: [{}],
      rolloutInfos: {},
      endReason: "done",
      error: undefined,
      turns: [{ finishReason: "stop" }],
      tokens: undefined,
      timings: { totalMs: 1, resetMs: 1, turns: [{ modelMs: 1, envMs: 1 }] },
      ...over
    }
  } as unknown as Rollout.TrajectoryRecord
}

/**
 * An env that offers `tools()` (a fresh toolkit per env) at reset, answers a reply's tool calls with
 * the toolkit's tool messages (reward 0, the bad calls' reasons in `info.errors`) and ends with
 * reward 1 at the first reply without calls.
 */
export const toolkitEnv = (name: string, tools: () => Tool.Toolkit): Env.Definition =>
  Env.make({
    name,
    create: () => {
      const kit = tools()
      return {
        reset: () => ({ observation: "go", info: {}, tools: kit.specs }),
        step: (messages: ReadonlyArray<Message.Message>) => {
          const reply = messages.at(-1)!
          if (reply.tool_calls === undefined) return { observation: "", reward: 1, done: true, info: {} }
          return Effect.map(kit.handle(reply), (handled): Env.StepResult => ({
            observation: "",
            reward: 0,
            done: false,
            info: { errors: handled.errors.map((e) => e.reason) },
            toolMessages: handled.messages
          }))
        }
      }
    }
  })
