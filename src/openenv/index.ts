/**
 * OpenEnv: a WebSocket client, the `openenv` scheduler (one shared limit per server), and an
 * OpenEnv-compatible server for registered envs.
 *
 * @since 0.1.0
 */
export * as Client from "./Client.js"
export * as OpenEnvScheduler from "./OpenEnvScheduler.js"
export * as Protocol from "./Protocol.js"
export * as Server from "./Server.js"
