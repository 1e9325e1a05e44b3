/**
 * The registry the command line and the servers start from: the core's built-ins plus the built-ins
 * that live at the edges (they need Node, sockets or native code, so the core cannot import them).
 *
 * Edge built-ins: the `openenv` scheduler (OpenEnv servers over WebSocket).
 *
 * @since 0.1.0
 */
import { openenv } from "../openenv/OpenEnvScheduler.js"
import * as Registry from "../Registry.js"

/**
 * @since 0.1.0
 * @category constructors
 */
export const registry: Registry.Registry = Registry.add(Registry.builtins, { schedulers: [openenv] })
