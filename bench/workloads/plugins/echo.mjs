// The echo env of the OpenEnv workload (bench/workloads/openenv_python.ts): reset says
// "say something", each step answers "heard: <the last message>", reward 0, never done. The same
// env as the Python server's in bench/workloads/python/openenv_echo.py.
import { Env, Plugin } from "effect-gym"

class Echo {
  constructor() {
    this.steps = 0
  }
  reset() {
    this.steps = 0
    return { observation: "say something", info: { step: 0 } }
  }
  step(messages) {
    this.steps++
    return { observation: `heard: ${messages.at(-1).content}`, reward: 0, done: false, info: { step: this.steps } }
  }
}

export default Plugin.make({
  envs: [Env.fromClass({ name: "echo", description: "answers what it heard; never done", class: Echo })]
})
