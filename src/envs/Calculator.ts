/**
 * `calculator`: a built-in tool env with seeded, checkable answers. Each episode is an order
 * (`3 x widget, 7 x gadget, ...`) whose unit prices the model can only learn through the `lookup`
 * tool; it computes the total with the `calculate` tool (or by itself) and answers
 * `<answer>TOTAL</answer>`. The reward is 1 when the answer is the order's total and every ordered
 * item was looked up in the episode, else 0: it needs the tools.
 *
 * The prices, items and quantities come from the row's seed (`env_config.seed`, else the run's row
 * seed), so {@link task} gives the expected total of any episode.
 *
 * @since 0.3.0
 */
import { Effect, Schema } from "effect"
import * as Env from "../Env.js"
import { mixSeed, Rng } from "../internal/seed.js"
import type * as Message from "../Message.js"
import * as Tool from "../Tool.js"
import { afterDone, answerCalls } from "./internal/toolEnv.js"

/**
 * The items an order may hold.
 *
 * @since 0.3.0
 * @category models
 */
export const CATALOGUE = [
  "widget", "gadget", "sprocket", "gizmo", "bracket", "flange", "spindle", "grommet", "valve", "bearing", "piston",
  "rivet"
] as const

/**
 * @since 0.3.0
 * @category models
 */
export interface Line {
  readonly item: string
  readonly quantity: number
  readonly price: number
}

/**
 * @since 0.3.0
 * @category models
 */
export interface Task {
  readonly order: ReadonlyArray<Line>
  /** Every catalogue item's unit price in this episode (the `lookup` tool's answers). */
  readonly prices: Readonly<Record<string, number>>
  readonly total: number
}

/**
 * The episode of a seed: `items` distinct items, quantities 2..9, unit prices 101..999.
 *
 * @since 0.3.0
 * @category constructors
 */
export const task = (seed: number, items: number): Task => {
  const rng = new Rng(mixSeed(seed, 0xca1c))
  const prices: Record<string, number> = {}
  for (const item of CATALOGUE) prices[item] = 101 + rng.int(899)
  const pool: Array<string> = [...CATALOGUE]
  const order: Array<Line> = []
  for (let i = 0; i < items; i++) {
    const item = pool.splice(rng.int(pool.length), 1)[0]
    order.push({ item, quantity: 2 + rng.int(8), price: prices[item] })
  }
  return { order, prices, total: order.reduce((sum, line) => sum + line.quantity * line.price, 0) }
}

/**
 * @since 0.3.0
 * @category constants
 */
export const SYSTEM_PROMPT = "You are a careful shop assistant with two tools: lookup(item) gives an item's unit " +
  "price, calculate(op, a, b) computes a + b, a - b, a * b or a / b. Use them, then reply with <answer>TOTAL</answer>."

/**
 * The first observation of an episode.
 *
 * @since 0.3.0
 * @category rendering
 */
export const prompt = (order: ReadonlyArray<Line>): string =>
  `Order: ${order.map((line) => `${line.quantity} x ${line.item}`).join(", ")}.\n` +
  "Unit prices are only known to the lookup tool. Compute the order's total and answer with <answer>TOTAL</answer>."

const ANSWER = /<answer>\s*(-?\d+(?:\.\d+)?)\s*<\/answer>/

const Config = Schema.Struct({
  seed: Schema.optionalKey(Schema.Int),
  items: Schema.optionalKey(
    Schema.Int.check(Schema.makeFilter((n) => (n >= 1 && n <= CATALOGUE.length) || `must be 1 to ${CATALOGUE.length}`))
  )
})

const Operation = Schema.Literals(["add", "subtract", "multiply", "divide"])

/**
 * The episode's tools: `lookup` reads its prices (and records what was looked up), `calculate`
 * does arithmetic.
 *
 * @since 0.3.0
 * @category constructors
 */
export const tools = (prices: Readonly<Record<string, number>>, lookedUp: Set<string>): Tool.Toolkit =>
  Tool.toolkit([
    Tool.make({
      name: "lookup",
      description: "The unit price of an item",
      parameters: Schema.Struct({ item: Schema.String.annotate({ description: "the item's name, e.g. widget" }) }),
      run: ({ item }) => {
        const key = item.trim().toLowerCase()
        const price = prices[key]
        if (price === undefined) return Effect.fail(`unknown item ${JSON.stringify(item)}`)
        lookedUp.add(key)
        return Effect.succeed(price)
      }
    }),
    Tool.make({
      name: "calculate",
      description: "Computes a op b",
      parameters: Schema.Struct({
        op: Operation.annotate({ description: "add, subtract, multiply or divide" }),
        a: Schema.Finite,
        b: Schema.Finite
      }),
      run: ({ op, a, b }) =>
        op === "divide" && b === 0
          ? Effect.fail("division by zero")
          : Effect.succeed(op === "add" ? a + b : op === "subtract" ? a - b : op === "multiply" ? a * b : a / b)
    })
  ])

/**
 * @since 0.3.0
 * @category definitions
 */
export const Calculator: Env.Definition = Env.define({
  name: "calculator",
  description: "An order to total with lookup and calculate tools; reward 1 for the right total with every item looked up",
  config: Config,
  make: (config) =>
    Effect.sync((): Env.Env => {
      let current: Task | undefined
      let ended = false
      const lookedUp = new Set<string>()
      let toolkit: Tool.Toolkit | undefined
      return {
        reset: (request) =>
          Effect.sync(() => {
            current = task(config.seed ?? request.seed, config.items ?? 3)
            ended = false
            lookedUp.clear()
            toolkit = tools(current.prices, lookedUp)
            return {
              observation: prompt(current.order),
              systemPrompt: SYSTEM_PROMPT,
              info: { items: current.order.length },
              tools: toolkit.specs
            }
          }),
        step: (messages: ReadonlyArray<Message.Message>) => {
          const episode = current
          const kit = toolkit
          if (episode === undefined || kit === undefined) {
            return Effect.fail(new Env.EnvError({ env: "calculator", phase: "step", detail: "step before reset" }))
          }
          const reply = messages.at(-1)
          // A step after done (a caller other than the gym scheduler) is answered, calls included, and stays done.
          if (ended) return Effect.succeed(afterDone(reply))
          if (reply?.tool_calls !== undefined && reply.tool_calls.length > 0) return answerCalls(kit, reply)
          const answer = ANSWER.exec(reply?.content ?? "")
          if (answer === null) {
            return Effect.succeed<Env.StepResult>({
              observation: "Call a tool, or answer with <answer>TOTAL</answer>.",
              reward: 0,
              done: false,
              info: { answer: null }
            })
          }
          ended = true
          const value = Number(answer[1])
          const lookedUpAll = episode.order.every((line) => lookedUp.has(line.item))
          const correct = value === episode.total
          return Effect.succeed<Env.StepResult>({
            observation: correct ? "Correct." : `Wrong: the total is ${episode.total}.`,
            reward: correct && lookedUpAll ? 1 : 0,
            done: true,
            info: { answer: value, expected: episode.total, correct, looked_up_all: lookedUpAll }
          })
        }
      }
    })
})
