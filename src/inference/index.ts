/**
 * Inference backends: layers of the core's `Inference` tag. Server mode talks to an
 * OpenAI-compatible HTTP API (`OpenAiCompat`); colocate mode runs a GGUF model in-process with
 * node-llama-cpp (`LlamaCpp`, which imports node-llama-cpp only when used); scripted policies
 * (`Scripted`: no model, for tests, demos and benchmarks) are in-process `Inference` services.
 *
 * @since 0.1.0
 */
export * as ChatTemplate from "./ChatTemplate.js"
export * as HfTokenizer from "./HfTokenizer.js"
export * as LlamaCpp from "./LlamaCpp.js"
export * as OpenAiCompat from "./OpenAiCompat.js"
export * as PromptTokens from "./PromptTokens.js"
export * as Sampling from "./Sampling.js"
export * as Scripted from "./Scripted.js"
export * as SwiftRollout from "./SwiftRollout.js"
export * as ToolParsers from "./ToolParsers.js"
