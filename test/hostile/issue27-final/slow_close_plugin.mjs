import { Env, Plugin } from "effect-gym"
// An env whose steps take 20 ms, never done by itself, and whose close takes 1 s.
export default Plugin.make({
  name: "slow-close",
  envs: [Env.make({ name: "slow_close", create: () => ({
    reset: () => ({ observation: "go", info: {} }),
    step: () => new Promise((r) => setTimeout(() => r({ observation: "x", reward: 1, done: false, info: {} }), 20)),
    close: () => new Promise((r) => setTimeout(r, 1000))
  }) })]
})
