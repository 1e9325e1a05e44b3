#!/usr/bin/env node
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import { Cause, Effect, Exit } from "effect"
import { main } from "./Cli.js"

// An interrupted command exits with 130, unless it set its own code while stopping (serve sets 0).
let codeOnInterrupt = 130

const program = main(process.argv, (code) => void (codeOnInterrupt = code)).pipe(Effect.provide(NodeContext.layer))

NodeRuntime.runMain(program, {
  disableErrorReporting: true,
  teardown: (exit, onExit) =>
    onExit(
      Exit.isSuccess(exit) ? (exit.value as number) : Cause.isInterruptedOnly(exit.cause) ? codeOnInterrupt : 1
    )
})
