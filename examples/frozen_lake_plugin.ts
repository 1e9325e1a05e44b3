/**
 * An example plugin, written the way a user writes one: load it with
 *
 *   npx effect-gym run --plugin examples/frozen_lake_plugin.ts --env slippery_frozen_lake ...
 *
 * It registers:
 * - `slippery_frozen_lake`: FrozenLake where each move slips to a random side with probability
 *   `slip` (seeded by the row, so every generation of a row sees the same ice). It is a plain
 *   class with async methods, as a Python env would be, adapted with `Env.fromClass`.
 * - `frozen_lake_hints`: a scheduler built on the gym scheduler that appends the distance to the
 *   goal to every observation.
 * - `short_path`: a reward function that prefers trajectories with fewer turns.
 * - a renderer for `effect-gym view`: the slippery lake's board, step by step, with each slip noted
 *   (`npx effect-gym view completions.jsonl --plugin examples/frozen_lake_plugin.ts`).
 */
import { Effect, Result, Schema } from "effect"
import { Env, FrozenLake, Plugin, PyRandom, Reward, Scheduler } from "effect-gym"
import type { Message } from "effect-gym/Message"
import { Renderer } from "effect-gym/view"

const between = (minimum: number, maximum: number) => Schema.isBetween({ minimum, maximum })

const SlipperyConfig = Schema.Struct({
  size: Schema.Int.check(between(2, 16)).pipe(Schema.withDecodingDefaultType(Effect.succeed(4))),
  p: Schema.Number.check(between(0, 1)).pipe(Schema.withDecodingDefaultType(Effect.succeed(0.8))),
  slip: Schema.Number.check(between(0, 1)).pipe(Schema.withDecodingDefaultType(Effect.succeed(0.2))),
  seed: Schema.optional(Schema.Int)
})

const SIDEWAYS: Record<FrozenLake.Action, ReadonlyArray<FrozenLake.Action>> = {
  up: ["left", "right"],
  down: ["left", "right"],
  left: ["up", "down"],
  right: ["up", "down"]
}

class SlipperyFrozenLake {
  private grid: ReadonlyArray<string> = []
  private row = 0
  private col = 0
  private rng: PyRandom.PyRandom | undefined

  constructor(private readonly config: typeof SlipperyConfig.Type) {}

  async reset(request: Env.ResetRequest): Promise<Env.ResetResult> {
    const seed = this.config.seed ?? request.seed
    // Fails (the env's reset fails with it) only when no solvable map comes within the budget.
    this.grid = Result.getOrThrowWith(FrozenLake.generateMap(this.config.size, this.config.p, seed), (error) => error)
    this.rng = new PyRandom.PyRandom(seed + 1)
    this.row = this.grid.findIndex((line) => line.includes("S"))
    this.col = this.grid[this.row].indexOf("S")
    return {
      observation: `Slippery FrozenLake ${this.config.size}x${this.config.size}:\n` +
        `${FrozenLake.render(this.grid, this.row, this.col)}\n\nOutput your first move.`,
      info: { seed, slip: this.config.slip },
      systemPrompt: `${FrozenLake.SYSTEM_PROMPT}\nThe ice is slippery: a move may slide you sideways.`
    }
  }

  async step(messages: ReadonlyArray<Message>): Promise<Env.StepResult> {
    const intended = FrozenLake.parseAction(messages[messages.length - 1]?.content ?? "")
    if (intended === undefined) {
      return { observation: "Reply with <action>up|down|left|right</action>.", reward: 0, done: false, info: { status: "invalid_action" } }
    }
    const slipped = this.rng!.random() < this.config.slip
    const move = slipped ? SIDEWAYS[intended][this.rng!.randrange(2)] : intended
    const [dr, dc] = FrozenLake.ACTIONS[move]
    this.row = Math.max(0, Math.min(this.grid.length - 1, this.row + dr))
    this.col = Math.max(0, Math.min(this.grid.length - 1, this.col + dc))
    const cell = this.grid[this.row][this.col]
    const board = FrozenLake.render(this.grid, this.row, this.col)
    const info = { intended, moved: move, slipped }
    if (cell === "G") return { observation: `You reached the goal!\n${board}`, reward: 1, done: true, info: { ...info, status: "goal" } }
    if (cell === "H") return { observation: `You fell into a hole.\n${board}`, reward: 0, done: true, info: { ...info, status: "hole" } }
    const note = slipped ? ` You slipped and moved ${move}.` : ""
    return { observation: `You moved ${move}.${note}\n${board}\nOutput your next move.`, reward: 0, done: false, info: { ...info, status: "ok" } }
  }

  async close(): Promise<void> {
    this.rng = undefined
  }
}

const slipperyFrozenLake = Env.fromClass({
  name: "slippery_frozen_lake",
  description: "FrozenLake on slippery ice (config: size, p, slip, seed)",
  config: SlipperyConfig,
  class: SlipperyFrozenLake
})

/** Manhattan distance from the player to the goal in the last grid of a text. */
const distanceToGoal = (text: string): number | undefined => {
  const lines = text.split("\n").filter((line) => /^[SFHGP*](?: [SFHGP*])+$/.test(line)).map((l) => l.replace(/ /g, ""))
  const find = (ch: string) => {
    const r = lines.findIndex((line) => line.includes(ch))
    return r < 0 ? undefined : [r, lines[r].indexOf(ch)] as const
  }
  const player = find("P")
  const goal = find("G")
  return player && goal ? Math.abs(player[0] - goal[0]) + Math.abs(player[1] - goal[1]) : undefined
}

const frozenLakeHints = Scheduler.extend(Scheduler.gym, {
  name: "frozen_lake_hints",
  description: "The gym scheduler, with the distance to the goal added to each observation",
  session: (base) => ({
    step: (context, result) =>
      Effect.map(base.step(context, result), (messages) => {
        const last = messages[messages.length - 1]
        const distance = distanceToGoal(last.content)
        if (last.role !== "user" || distance === undefined) return messages
        return [...messages.slice(0, -1), { ...last, content: `${last.content}\n(Hint: the goal is ${distance} moves away.)` }]
      })
  })
})

const shortPath = Reward.define({
  name: "short_path",
  description: "1 / number of turns for trajectories that reached the goal, else 0",
  score: ({ trajectory }) => (trajectory.totalReward > 0 ? 1 / Math.max(1, trajectory.numTurns) : 0)
})

/** The built-in FrozenLake board (it reads the board text the observations show), slips noted. */
const slipperyBoard = Renderer.make({
  name: "slippery_frozen_lake",
  description: "the board and the path walked, each slip noted",
  render: (line) => {
    const board = Renderer.frozenLakeBoard(line)
    const infos = Renderer.stepInfos(line)
    return {
      ...board,
      frames: board.frames.map((frame) => {
        const info = infos[frame.turn - 1]
        return info?.slipped === true
          ? { ...frame, notes: [...(frame.notes ?? []), { text: `slipped: meant ${info.intended}, moved ${info.moved}`, tone: "info" as const }] }
          : frame
      })
    }
  }
})

export default Plugin.make({
  name: "frozen-lake-examples",
  envs: [slipperyFrozenLake],
  schedulers: [frozenLakeHints],
  rewards: [shortPath],
  renderers: [slipperyBoard]
})
