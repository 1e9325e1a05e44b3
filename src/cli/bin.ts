#!/usr/bin/env node
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import { Cause, Effect, Exit } from "effect"
import { main } from "./Cli.js"

NodeRuntime.runMain(main(process.argv).pipe(Effect.provide(NodeContext.layer)), {
  disableErrorReporting: true,
  teardown: (exit, onExit) =>
    onExit(
      Exit.isSuccess(exit) ? (exit.value as number) : Cause.isInterruptedOnly(exit.cause) ? 130 : 1
    )
})
