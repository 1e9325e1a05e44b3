#!/usr/bin/env node
/**
 * The process around one invocation: runs `main`, exits with its code, and handles signals.
 *
 * - A first SIGINT, SIGTERM or SIGHUP stops a command that handles it (`run`: the groups finished
 *   are written and the summary is printed) or interrupts the others (`serve` shuts down
 *   gracefully); an interrupted command exits with 130 (SIGINT), 143 (SIGTERM) or 129 (SIGHUP)
 *   unless it set its own code while stopping (`serve` sets 0).
 * - A second SIGINT or SIGTERM exits at once, with the first signal's code (the same signal within
 *   100 ms of the one before is that one: `timeout` and systemd send it to the process and its group). A SIGHUP never does: a
 *   closing terminal sends it more than once (the kernel, then the shell to its jobs), and no one is
 *   left at that terminal to ask for a hard stop.
 * - SIGHUP is the terminal closing (an SSH session dropped); without a listener Node's default ends
 *   the process at once, its envs in flight not closed. Node resets an ignored SIGHUP to the default
 *   at start, so `nohup` does not keep a Node process alive; `setsid` does (no terminal).
 * - Output that cannot be written any more (a reader gone: EPIPE; a terminal gone: EIO) is dropped,
 *   not an error of the command: the run goes on and writes its log.
 * - The process always exits when the command ends, even if something it abandoned (an env whose
 *   close never returned) still holds the event loop; it first lets its output on a pipe go out.
 */
import { Cause, Deferred, Effect, Exit } from "effect"
import * as fs from "node:fs"
import * as tty from "node:tty"
import { layer, main } from "./Cli.js"
import type { StopSignal as Signal } from "../Summary.js"
import { signalExitCode } from "./common.js"

let codeOnInterrupt: number | undefined
let graceful = false
let first: Signal | undefined
const received = Deferred.makeUnsafe<Signal>()

/** The standard descriptors that were a terminal at start (a hung-up terminal is not one any more). */
const terminals = [0, 1, 2].filter((fd) => tty.isatty(fd))

/** Whether a standard descriptor's terminal has hung up (it was one at start and is not now). */
const hungUp = (): boolean => terminals.some((fd) => !tty.isatty(fd))

const program = main(process.argv, (code) => void (codeOnInterrupt = code), {
  handle: () => void (graceful = true),
  received: Deferred.await(received),
  hungUp
}).pipe(Effect.provide(layer))

const fiber = Effect.runFork(program)
const keepAlive = setInterval(() => {}, 2 ** 31 - 1)

// Node restores each standard descriptor's terminal settings at exit and aborts when it cannot: on
// a terminal that has hung up (`tcsetattr` fails with EIO) a run stopped by SIGHUP exited 134 or 139
// instead of 129, after writing its log. Node skips a descriptor that is closed, so those whose
// terminal has gone are closed as the process exits, whichever way it exits (an uncaught exception
// of a plugin's timer included).
process.on("exit", () => {
  for (const fd of terminals) {
    if (tty.isatty(fd)) continue
    try {
      fs.closeSync(fd)
    } catch {
      // closed already
    }
  }
})

// One signal can come twice at once: GNU `timeout` and systemd (KillMode=control-group) signal the
// process and then its whole group, and under the launcher (src/cli/launch.ts) the group's signal
// comes passed on too. Taken as two, `timeout 600 node bin/effect-gym.js run ...` exited at once
// without its summary ("SIGTERM again", 4 runs in 4 on the system's Node 20). The same signal
// within SAME_SIGNAL_MS of the one before is that one (no one presses Ctrl-C twice that fast).
const SAME_SIGNAL_MS = 100
const lastAt = new Map<Signal, number>()

const onSignal = (signal: Signal) => {
  const now = Date.now()
  const previous = lastAt.get(signal)
  if (previous !== undefined && now - previous < SAME_SIGNAL_MS) return
  lastAt.set(signal, now)
  if (first !== undefined) {
    if (signal === "SIGHUP") return
    process.stderr.write(`\n${signal} ${signal === first ? "again" : `after ${first}`}: exiting now\n`)
    process.exit(signalExitCode(first))
  }
  first = signal
  if (graceful) Deferred.doneUnsafe(received, Effect.succeed(signal))
  else fiber.interruptUnsafe()
}
// A reader of stdout that has gone (EPIPE: `| head -1`) is not an error of the command: what it
// writes after that is dropped (`dataset` stops making rows), and the exit code stays its own. The
// same for stderr, and for a terminal that has gone (EIO after a hangup: the progress line's next
// write ended the process before the run could stop).
process.stdout.on("error", () => {})
process.stderr.on("error", () => {})
// Run again by the launcher on the clone's Node (src/cli/launch.ts), a SIGINT sent to the launcher
// comes as SIGUSR2. At a terminal a Ctrl-C reaches both processes, so the same SIGINT arrives twice,
// straight and passed on: one of each within a second is one SIGINT (two of the same kind are two).
let lastInt: { readonly forwarded: boolean; readonly at: number } | undefined
const onInt = (forwarded: boolean) => {
  const now = Date.now()
  if (lastInt !== undefined && lastInt.forwarded !== forwarded && now - lastInt.at < 1_000) {
    lastInt = undefined
    return
  }
  lastInt = { forwarded, at: now }
  onSignal("SIGINT")
}
process.on("SIGINT", () => onInt(false))
if (process.env.EFFECT_GYM_RERUN === "1") process.on("SIGUSR2", () => onInt(true))
process.on("SIGTERM", () => onSignal("SIGTERM"))
process.on("SIGHUP", () => onSignal("SIGHUP"))

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
  else if (Cause.hasInterruptsOnly(exit.cause)) {
    code = codeOnInterrupt ?? signalExitCode(first ?? "SIGINT")
    if (codeOnInterrupt === undefined) process.stderr.write(`interrupted by ${first ?? "an interruption"}\n`)
  }
  else {
    process.stderr.write(`error: internal error: ${Cause.pretty(exit.cause)}\n`)
    // A command that fails once its terminal has hung up failed on it (the wizard's next prompt):
    // that is the hangup's stop, not an error of the command.
    code = hungUp() ? signalExitCode("SIGHUP") : 3
  }
  exitFlushed(code)
})
