/**
 * Token in, token out: the prompt of each call as tokens, built so that a trajectory is one token
 * sequence and model output is never decoded and re-encoded.
 *
 * - The first prompt is the conversation rendered with the model's chat template and the
 *   generation prompt, tokenized.
 * - Each later prompt is the previous prompt, the previous call's sampled tokens exactly as the
 *   backend returned them, and the tokens of what the template adds after that reply: the end of
 *   the assistant turn (when the model did not sample it), the new messages (the env's
 *   observation) and the generation prompt. Those come from the template applied to the whole
 *   conversation with the reply replaced by a marker: everything after the marker is rendered and
 *   tokenized, nothing before it. So however the template would re-render earlier replies (Qwen3
 *   drops their reasoning), the prompt keeps what the model actually sampled.
 * - Tools: the call's tools are rendered by the template (its `tools` variable) in every prompt.
 *   A reply with tool calls is its sampled tokens (the calls included, as the model wrote them), and
 *   the tool messages that answer it are template tokens after it, as an observation is; the marker
 *   stands for the whole reply, calls included, since its tokens are already the sequence's.
 * - When the conversation is not the previous one plus new messages (a scheduler that rewrote it),
 *   the prompt is rendered afresh, and the trajectory's single sequence ends there (`reused` 0).
 *
 * A {@link Renderer} does the template and tokenizer work: {@link local} (a Jinja template and a
 * tokenizer in this process, as colocate mode and server mode's `--tokenizer` use) or a server's
 * own `/tokenize` (see `OpenAiCompat`).
 *
 * @since 0.2.0
 */
import { Effect, Result } from "effect"
import type { ChatRequest, PromptTokens } from "../Inference.js"
import { InferenceError } from "../Inference.js"
import type { Message } from "../Message.js"
import type * as Tool from "../Tool.js"
import type { ChatTemplate } from "./ChatTemplate.js"

/**
 * @since 0.2.0
 * @category models
 */
export interface Renderer {
  /** For messages: `local template` or the server that tokenizes. */
  readonly name: string
  /** The conversation rendered (with or without the generation prompt) and tokenized. */
  readonly tokenize: (
    messages: ReadonlyArray<Message>,
    options: {
      readonly addGenerationPrompt: boolean
      readonly kwargs?: Readonly<Record<string, unknown>> | undefined
      /** The tools offered (the template's `tools`). */
      readonly tools?: ReadonlyArray<Tool.Spec> | undefined
    }
  ) => Effect.Effect<ReadonlyArray<number>, InferenceError>
  /**
   * The tokens the template renders after the assistant message at `reply` through the end of
   * `messages`, with the generation prompt: the turn's closing, the new messages (tool results
   * included), the prompt.
   */
  readonly after: (
    messages: ReadonlyArray<Message>,
    reply: number,
    kwargs: Readonly<Record<string, unknown>> | undefined,
    tools?: ReadonlyArray<Tool.Spec> | undefined
  ) => Effect.Effect<ReadonlyArray<number>, InferenceError>
  /** Whether an id is a special token (end of turn); unknown for some renderers. */
  readonly isSpecial?: ((id: number) => boolean) | undefined
}

/**
 * Stands for the reply when the template renders the tokens after it. Plain letters: kept as is
 * by templates that trim or split their content.
 */
export const MARKER = "EffectGymReplyMarker7f3a9c"

const sameMessage = (a: Message, b: Message): boolean => a === b || (a.role === b.role && a.content === b.content)

/** Whether `messages` is `covered` followed by at least one message. */
export const extendsConversation = (messages: ReadonlyArray<Message>, covered: ReadonlyArray<Message>): boolean => {
  if (messages.length <= covered.length) return false
  for (let i = 0; i < covered.length; i++) if (!sameMessage(messages[i], covered[i])) return false
  return true
}

/**
 * The conversation with the message at `reply` replaced by the marker: role and content only, so a
 * reply's tool calls are not rendered a second time (their tokens are in the sampled reply) and a
 * template that writes calls instead of the content (Llama 3.1) still writes the marker.
 */
export const withMarker = (messages: ReadonlyArray<Message>, reply: number): Array<Message> =>
  messages.map((m, i) => (i === reply ? { role: m.role, content: MARKER } : m))

/**
 * The prompt of a call as tokens: the previous sequence plus the new tokens, or a fresh render.
 *
 * @since 0.2.0
 * @category constructors
 */
export const prompt = (
  renderer: Renderer,
  request: ChatRequest,
  kwargs: Readonly<Record<string, unknown>> | undefined
): Effect.Effect<PromptTokens, InferenceError> => {
  const previous = request.previous
  const tools = request.tools
  const fresh = (restarted?: string) =>
    Effect.map(
      renderer.tokenize(request.messages, { addGenerationPrompt: true, kwargs, tools }),
      (tokenIds): PromptTokens => (restarted === undefined ? { tokenIds, reused: 0 } : { tokenIds, reused: 0, restarted })
    )
  if (previous === undefined) return fresh()
  if (previous.sampled === 0) return fresh("the previous turn sampled no tokens")
  if (!extendsConversation(request.messages, previous.messages)) {
    return fresh("the conversation was rewritten between turns, e.g. by a custom scheduler")
  }
  const added = Effect.map(renderer.after(request.messages, previous.messages.length - 1, kwargs, tools), (added): PromptTokens => {
    const last = previous.tokenIds[previous.tokenIds.length - 1]
    // The model sampled the end of its turn (`<|im_end|>`) that the template would add: keep the
    // model's token, not a second copy. (A reply whose calls were parsed out of its text ended as
    // `tool_calls`: it stopped as a plain reply does.)
    const stopped = previous.finishReason === "stop" || previous.finishReason === "tool_calls"
    const sampledEnd = added.length > 0 && added[0] === last &&
      (renderer.isSpecial !== undefined ? renderer.isSpecial(last) : stopped)
    const tokenIds = previous.tokenIds.concat(sampledEnd ? added.slice(1) : added)
    return { tokenIds, reused: previous.tokenIds.length }
  })
  // A template whose rendering cannot be split after the reply still gets a prompt, rendered afresh.
  return Effect.catch(added, (error) => fresh(error.detail))
}

/**
 * A renderer from a chat template and a tokenizer in this process.
 *
 * @since 0.2.0
 * @category constructors
 */
export const local = (options: {
  readonly name: string
  readonly backend: string
  readonly template: ChatTemplate
  readonly encode: (text: string) => ReadonlyArray<number>
  readonly isSpecial?: ((id: number) => boolean) | undefined
  /** Kwargs under each call's own (`--chat-template-kwargs`). */
  readonly kwargs?: Readonly<Record<string, unknown>> | undefined
}): Renderer => {
  const fail = (detail: string, cause?: unknown) =>
    new InferenceError({
      reason: "InvalidRequest",
      backend: options.backend,
      detail,
      ...(cause === undefined ? {} : { cause })
    })
  const merged = (kwargs: Readonly<Record<string, unknown>> | undefined) =>
    options.kwargs === undefined ? kwargs : kwargs === undefined ? options.kwargs : { ...options.kwargs, ...kwargs }
  const render = (
    messages: ReadonlyArray<Message>,
    addGenerationPrompt: boolean,
    kwargs: Readonly<Record<string, unknown>> | undefined,
    tools: ReadonlyArray<Tool.Spec> | undefined
  ) =>
    Effect.fromResult(Result.mapError(
      options.template.render(messages, { addGenerationPrompt, kwargs: merged(kwargs), tools }),
      (error) => fail(error.detail, error)
    ))
  return {
    name: options.name,
    isSpecial: options.isSpecial,
    tokenize: (messages, { addGenerationPrompt, kwargs, tools }) =>
      Effect.map(render(messages, addGenerationPrompt, kwargs, tools), options.encode),
    after: (messages, reply, kwargs, tools) =>
      Effect.flatMap(render(withMarker(messages, reply), true, kwargs, tools), (text) => {
        const at = text.lastIndexOf(MARKER)
        if (at < 0 || text.indexOf(MARKER) !== at) {
          return Effect.fail(fail(
            "the chat template does not render an assistant message's content as it is, so the tokens after a reply " +
              "cannot be told apart (the token path needs a template that does)"
          ))
        }
        return Effect.succeed(options.encode(text.slice(at + MARKER.length)))
      })
  }
}
