#!/usr/bin/env node
// The bundled command line (scripts/bundle.mjs): the same program as dist/cli/bin.js, faster to start.
import "../dist/bundle/bin.js"
