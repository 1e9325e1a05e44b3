/**
 * The registry the command line and the servers start from: the package's built-ins
 * (`Builtins.registry`) plus the built-ins that live at the edges (they need sockets, so the core
 * cannot import them).
 *
 * Edge built-ins: the `openenv` scheduler (OpenEnv servers over WebSocket).
 *
 * @since 0.1.0
 */
import * as Builtins from "../Builtins.js"
import { openenv } from "../openenv/OpenEnvScheduler.js"
import * as Registry from "../Registry.js"

/**
 * @since 0.1.0
 * @category constructors
 */
export const registry: Registry.Registry = Registry.add(Builtins.registry, { schedulers: [openenv] })
