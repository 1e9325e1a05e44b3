/**
 * The OpenAPI document of the OpenEnv server (`GET /openapi.json`), built from the served env's
 * schemas (action, observation, state) as FastAPI builds the Python server's: the simulation
 * endpoints (`/reset`, `/step`, `/state`) are listed, which is how OpenEnv's validator tells a
 * simulation server from a production one.
 */

type JsonSchema = Record<string, unknown>

const json = (schema: JsonSchema) => ({ "application/json": { schema } })

const strip = (schema: JsonSchema): JsonSchema => {
  const { $schema: _ignored, ...rest } = schema
  return rest
}

export const document = (options: {
  readonly env: string
  readonly description: string
  readonly version: string
  readonly action: JsonSchema
  readonly observation: JsonSchema
  readonly state: JsonSchema
}) => {
  const ValidationError = {
    type: "object",
    properties: {
      detail: {
        type: "array",
        items: {
          type: "object",
          required: ["loc", "msg", "type"],
          properties: {
            loc: { type: "array", items: { anyOf: [{ type: "string" }, { type: "integer" }] } },
            msg: { type: "string" },
            type: { type: "string" }
          }
        }
      }
    }
  }
  const StepResponse = {
    type: "object",
    required: ["observation"],
    properties: {
      observation: { $ref: "#/components/schemas/Observation" },
      reward: { anyOf: [{ type: "number" }, { type: "null" }] },
      done: { type: "boolean", default: false }
    },
    additionalProperties: false
  }
  const ResetRequest = {
    type: "object",
    properties: {
      seed: { anyOf: [{ type: "integer", minimum: 0 }, { type: "null" }] },
      episode_id: { anyOf: [{ type: "string", maxLength: 255 }, { type: "null" }] }
    },
    additionalProperties: true
  }
  const StepRequest = {
    type: "object",
    required: ["action"],
    properties: {
      action: { $ref: "#/components/schemas/Action" },
      timeout_s: { anyOf: [{ type: "number", exclusiveMinimum: 0 }, { type: "null" }] },
      request_id: { anyOf: [{ type: "string", maxLength: 255 }, { type: "null" }] }
    },
    additionalProperties: true
  }
  const responses = (schema: JsonSchema, description: string) => ({
    "200": { description, content: json(schema) },
    "422": { description: "Validation Error", content: json({ $ref: "#/components/schemas/HTTPValidationError" }) }
  })
  return {
    openapi: "3.1.0",
    info: {
      title: "OpenEnv Environment HTTP API",
      version: options.version,
      description: `${options.env}: ${options.description} (served by effect-gym)`
    },
    paths: {
      "/reset": {
        post: {
          tags: ["Environment Control"],
          summary: "Reset the environment",
          requestBody: { content: json({ $ref: "#/components/schemas/ResetRequest" }) },
          responses: responses({ $ref: "#/components/schemas/StepResponse" }, "Environment reset successfully")
        }
      },
      "/step": {
        post: {
          tags: ["Environment Control"],
          summary: "Execute an action in the environment",
          requestBody: { required: true, content: json({ $ref: "#/components/schemas/StepRequest" }) },
          responses: responses({ $ref: "#/components/schemas/StepResponse" }, "Action executed successfully")
        }
      },
      "/state": {
        get: {
          tags: ["State Management"],
          summary: "Get current environment state",
          responses: { "200": { description: "Successful Response", content: json({ $ref: "#/components/schemas/State" }) } }
        }
      },
      "/metadata": {
        get: {
          tags: ["Environment Info"],
          summary: "Get environment metadata",
          responses: {
            "200": { description: "Successful Response", content: json({ $ref: "#/components/schemas/EnvironmentMetadata" }) }
          }
        }
      },
      "/health": {
        get: {
          tags: ["Health"],
          summary: "Health check",
          responses: {
            "200": {
              description: "Successful Response",
              content: json({ type: "object", properties: { status: { type: "string", enum: ["healthy"] } } })
            }
          }
        }
      },
      "/schema": {
        get: {
          tags: ["Schema"],
          summary: "Get all JSON schemas",
          responses: {
            "200": {
              description: "Successful Response",
              content: json({
                type: "object",
                required: ["action", "observation", "state"],
                properties: { action: { type: "object" }, observation: { type: "object" }, state: { type: "object" } }
              })
            }
          }
        }
      },
      "/mcp": {
        post: {
          summary: "MCP JSON-RPC endpoint (tools/list, tools/call, openenv/session/create, openenv/session/close)",
          requestBody: { content: json({ type: "object" }) },
          responses: { "200": { description: "A JSON-RPC 2.0 response", content: json({ type: "object" }) } }
        }
      }
    },
    components: {
      schemas: {
        Action: strip(options.action),
        Observation: strip(options.observation),
        State: strip(options.state),
        ResetRequest,
        StepRequest,
        StepResponse,
        EnvironmentMetadata: {
          type: "object",
          required: ["name", "description"],
          properties: {
            name: { type: "string" },
            description: { type: "string" },
            readme_content: { anyOf: [{ type: "string" }, { type: "null" }] },
            version: { anyOf: [{ type: "string" }, { type: "null" }] },
            author: { anyOf: [{ type: "string" }, { type: "null" }] },
            documentation_url: { anyOf: [{ type: "string" }, { type: "null" }] }
          },
          additionalProperties: false
        },
        HTTPValidationError: ValidationError
      }
    }
  }
}

const escapeHtml = (text: string) =>
  text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;")

/**
 * `GET /docs`: FastAPI serves Swagger UI there (scripts from a CDN); this server answers with a
 * page of its own, made from the same OpenAPI document, that needs nothing from elsewhere: each
 * route with its summary and description, and a link to `/openapi.json` for any OpenAPI tool.
 */
export const page = (openapi: ReturnType<typeof document>, title: string): string => {
  const rows: Array<string> = []
  for (const [path, methods] of Object.entries(openapi.paths as Record<string, Record<string, Record<string, unknown>>>)) {
    for (const [method, operation] of Object.entries(methods)) {
      const summary = typeof operation.summary === "string" ? operation.summary : ""
      const description = typeof operation.description === "string" ? operation.description.trim() : ""
      rows.push(
        `<tr><td><code>${method.toUpperCase()}</code></td><td><code>${escapeHtml(path)}</code></td>` +
          `<td><b>${escapeHtml(summary)}</b>${description === "" ? "" : `<pre>${escapeHtml(description)}</pre>`}</td></tr>`
      )
    }
  }
  return `<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>${escapeHtml(title)}</title>
<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:70em}td{vertical-align:top;padding:.4em .8em;border-bottom:1px solid #ddd}pre{white-space:pre-wrap;margin:.3em 0 0}</style>
</head><body><h1>${escapeHtml(title)}</h1>
<p>The OpenAPI document: <a href="/openapi.json">/openapi.json</a>. Sessions: <code>GET /ws</code> (WebSocket).</p>
<table>${rows.join("\n")}</table>
</body></html>
`
}
