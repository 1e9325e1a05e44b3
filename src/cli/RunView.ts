/**
 * `effect-gym run --view`: the viewer's live page on the run in progress (its log re-read as it
 * grows, its progress pushed to the page), served on 127.0.0.1 from the moment the log is opened;
 * after the run the page stays up, showing the finished run, until Ctrl-C.
 */
import { Console, Effect, Scope } from "effect"
import { Flag } from "effect/cli"
import * as Net from "node:net"
import type * as Live from "../view/Live.js"
import { cannotListen, checkPort, FileError, integer, OptionError, toggle, version } from "./common.js"
import type * as Progress from "./Progress.js"

/** The viewer's default port (as `effect-gym view`'s). */
export const DEFAULT_PORT = 8300

export const options = {
  view: toggle(
    "view",
    "Serve the viewer's live page on this run (127.0.0.1:--view-port): progress, rate, charts; it stays up after the run until Ctrl-C"
  ),
  viewPort: integer("view-port").pipe(
    Flag.withDescription("--view: the page's port (0 picks a free one)"),
    Flag.withDefault(DEFAULT_PORT)
  )
}

export interface Handle {
  /** Starts the page on the run's log (once the log is open) and prints its address on stderr. */
  readonly attach: (file: string, snapshot: () => Progress.Snapshot) => Effect.Effect<void, OptionError | FileError>
  /** The run has ended: its log is complete, and the page says the run finished. */
  readonly finish: Effect.Effect<void>
  /** Keeps the page up until the command is interrupted (nothing without --view). */
  readonly hold: Effect.Effect<void>
}

/** Fails (as a `--view-port` error) when 127.0.0.1:port cannot be listened on now. */
const portFree = (port: number): Effect.Effect<void, OptionError> =>
  Effect.callback<void, OptionError>((resume) => {
    const server = Net.createServer()
    server.once("error", (cause) => resume(cannotListen("127.0.0.1", port, "--view-port")({ cause })))
    server.listen({ host: "127.0.0.1", port, exclusive: true }, () => server.close(() => resume(Effect.void)))
  })

/** The `--view` of a run; the page lives in the current scope (the command's, beyond the run's). */
export const make = (args: { readonly view: boolean; readonly viewPort: number }): Effect.Effect<Handle, OptionError, Scope.Scope> =>
  Effect.gen(function*() {
    if (!args.view) return { attach: () => Effect.void, finish: Effect.void, hold: Effect.void }
    yield* checkPort(args.viewPort)
    // The page can only be served once the run has opened (and so truncated) its log: a port that
    // is taken must stop the run before that, or an earlier log under --output would be lost.
    if (args.viewPort !== 0) yield* portFree(args.viewPort)
    // The viewer's server loads only with --view.
    const [Live, Server] = yield* Effect.promise(() => Promise.all([import("../view/Live.js"), import("../view/Server.js")]))
    const scope = yield* Effect.scope
    let current: (() => Progress.Snapshot) | undefined
    // Once the run is over its figures stop moving (its rates would otherwise decay with the clock).
    let final: Live.RunProgress | undefined
    const progressOf = (finished: boolean) => {
      const s = current!()
      return Live.progress(s.accumulator.summary(s.elapsedMs), s.total, finished)
    }
    let served: { readonly url: string; readonly finish: Effect.Effect<void, unknown> } | undefined
    return {
      attach: (file, snapshot) =>
        Effect.suspend(() => {
          current = snapshot
          return Server.serveRun({
            file,
            port: args.viewPort,
            version: version(),
            progress: Effect.sync(() => final ?? progressOf(false))
          })
        }).pipe(
          Scope.provide(scope),
          Effect.catchTags({
            ServeError: cannotListen("127.0.0.1", args.viewPort, "--view-port"),
            LogError: (error) => Effect.fail(new FileError({ option: "--output", file: error.file, detail: error.detail })),
            AssetsError: (error) => Effect.fail(new OptionError({ option: "--view", detail: error.message }))
          }),
          Effect.tap((running) => {
            served = running
            return Console.error(`view: ${running.url} (the run's live page)`)
          }),
          Effect.asVoid
        ),
      finish: Effect.suspend(() => {
        if (current !== undefined) final = progressOf(true)
        return served === undefined ? Effect.void : Effect.ignore(served.finish)
      }),
      hold: Effect.suspend(() =>
        served === undefined
          ? Effect.void
          : Effect.andThen(Console.error(`view: the run is done; its page stays at ${served.url} until Ctrl-C`), Effect.never)
      )
    } satisfies Handle
  })
