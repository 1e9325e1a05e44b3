#!/usr/bin/env node
/**
 * The process around one invocation: runs `main`, exits with its code, and handles signals.
 *
 * - A first SIGINT or SIGTERM stops a command that handles it (`run`: the groups finished are
 *   written and the summary is printed) or interrupts the others (`serve` shuts down gracefully);
 *   an interrupted command exits with 130 (SIGINT) or 143 (SIGTERM) unless it set its own code
 *   while stopping (`serve` sets 0).
 * - A second signal exits at once, with the first signal's code.
 * - The process always exits when the command ends, even if something it abandoned (an env whose
 *   close never returned) still holds the event loop; it first lets its output on a pipe go out.
 */
import * as NodeContext from "@effect/platform-node/NodeContext"
import { Cause, Deferred, Effect, Exit, FiberId } from "effect"
import { main } from "./Cli.js"
import { signalExitCode } from "./common.js"

type Signal = "SIGINT" | "SIGTERM"

let codeOnInterrupt: number | undefined
let graceful = false
let first: Signal | undefined
const received = Deferred.unsafeMake<Signal>(FiberId.none)

const program = main(process.argv, (code) => void (codeOnInterrupt = code), {
  handle: () => void (graceful = true),
  received: Deferred.await(received)
}).pipe(Effect.provide(NodeContext.layer))

const fiber = Effect.runFork(program)
const keepAlive = setInterval(() => {}, 2 ** 31 - 1)

const onSignal = (signal: Signal) => {
  if (first !== undefined) {
    process.stderr.write(`\n${signal} again: exiting now\n`)
    process.exit(signalExitCode(first))
  }
  first = signal
  if (graceful) Deferred.unsafeDone(received, Exit.succeed(signal))
  else fiber.unsafeInterruptAsFork(fiber.id())
}
// A reader of stdout that has gone (EPIPE: `| head -1`) is not an error of the command: what it
// writes after that is dropped (`dataset` stops making rows), and the exit code stays its own.
process.stdout.on("error", () => {})
process.on("SIGINT", () => onSignal("SIGINT"))
process.on("SIGTERM", () => onSignal("SIGTERM"))

/**
 * Exits with `code` once what the command wrote to stdout and stderr has gone out: `process.exit`
 * drops the writes still queued on a pipe, so `effect-gym dataset frozen-lake --rows 200000 | wc -l`
 * counted 790 (the pipe's 64 KB). A reader that is gone (EPIPE: `| head -1`) does not hold the exit,
 * and a second signal still exits at once.
 */
const exitFlushed = (code: number): void => {
  const pending = [process.stdout, process.stderr].filter((stream) => stream.writableLength > 0 && !stream.destroyed)
  let left = pending.length
  if (left === 0) process.exit(code)
  for (const stream of pending) {
    let done = false
    const flushed = () => {
      if (done) return
      done = true
      if (--left === 0) process.exit(code)
    }
    stream.on("error", flushed)
    stream.on("close", flushed)
    stream.write("", flushed)
  }
}

fiber.addObserver((exit) => {
  clearInterval(keepAlive)
  let code: number
  if (Exit.isSuccess(exit)) code = exit.value
  else if (Cause.isInterruptedOnly(exit.cause)) {
    code = codeOnInterrupt ?? signalExitCode(first ?? "SIGINT")
    if (codeOnInterrupt === undefined) process.stderr.write(`interrupted by ${first ?? "an interruption"}\n`)
  }
  else {
    process.stderr.write(`error: internal error: ${Cause.pretty(exit.cause)}\n`)
    code = 3
  }
  exitFlushed(code)
})
