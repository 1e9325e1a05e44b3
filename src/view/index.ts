/**
 * `effect-gym/view`: the report page of completions logs (`effect-gym view`), its engine and
 * server, env renderers (a plugin's `renderers` are made with `Renderer.make`), live pages.
 *
 * @since 0.1.0
 */
export * as Dashboard from "./Dashboard.js"
export * as Detail from "./Detail.js"
export * as Html from "./Html.js"
export * as Live from "./Live.js"
export * as LogIndex from "./LogIndex.js"
export * as Model from "./Model.js"
export * as Protocol from "./Protocol.js"
export * as Renderer from "./Renderer.js"
export * as Report from "./Report.js"
export * as Server from "./Server.js"
export * as Tokens from "./Tokens.js"
export * as Viewer from "./Viewer.js"
