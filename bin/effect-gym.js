#!/usr/bin/env node
// The bundled command line with V8's code cache (src/cli/launch.ts, scripts/bundle.mjs): the same
// program as dist/cli/bin.js, faster to start.
import { main } from "../dist/bundle/launch.js"

await main()
