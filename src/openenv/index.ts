/**
 * OpenEnv: a WebSocket client, the `openenv` env and scheduler (the `OpenEnvPool` service: one shared
 * limit per server), and an
 * OpenEnv-compatible server for registered envs.
 *
 * @since 0.1.0
 */
export * as OpenEnvClient from "./OpenEnvClient.js"
export * as OpenEnvPool from "./OpenEnvPool.js"
export * as OpenEnvProtocol from "./OpenEnvProtocol.js"
export * as OpenEnvScheduler from "./OpenEnvScheduler.js"
export * as OpenEnvServer from "./OpenEnvServer.js"
