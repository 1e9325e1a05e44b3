/**
 * The rollout server (trainer-facing HTTP API) and its client.
 *
 * @since 0.1.0
 */
export * as Api from "./Api.js"
export * as RolloutClient from "./RolloutClient.js"
export * as RolloutServer from "./RolloutServer.js"
