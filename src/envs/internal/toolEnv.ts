/**
 * What the built-in tool envs (`calculator`, `kv_store`) answer alike: a reply's tool calls, and a
 * step after done. Internal.
 */
import { Effect } from "effect"
import type * as Env from "../../Env.js"
import type * as Message from "../../Message.js"
import type * as Tool from "../../Tool.js"

/**
 * The step that answers a reply's tool calls with the toolkit: one tool message per call, no
 * observation, no reward, not done; the info counts the calls and names each bad call's reason.
 */
export const answerCalls = (kit: Tool.Toolkit, reply: Message.Message): Effect.Effect<Env.StepResult> =>
  Effect.map(kit.handle(reply), (handled): Env.StepResult => ({
    observation: "",
    reward: 0,
    done: false,
    info: { tool_calls: reply.tool_calls?.length ?? 0, tool_errors: handled.errors.map((e) => e.reason) },
    toolMessages: handled.messages
  }))

/**
 * A step after done (a caller other than the gym scheduler): answered, its calls included, and it
 * stays done with no reward.
 */
export const afterDone = (reply: Message.Message | undefined): Env.StepResult => ({
  observation: "The episode is over.",
  reward: 0,
  done: true,
  info: { after_done: true },
  ...(reply?.tool_calls === undefined ? {} : {
    toolMessages: reply.tool_calls.map((call) => ({
      role: "tool" as const,
      content: "Error: the episode is over",
      tool_call_id: call.id,
      name: call.function.name
    }))
  })
})
