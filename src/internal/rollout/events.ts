/**
 * The turn events of a run, buffered in one batch shared by every trajectory. Internal to the run
 * engine.
 */
import type { Effect } from "effect"
import { Queue } from "effect"
import type { Item } from "../../Rollout.js"
import type { TrajectoryRequest } from "../../Scheduler.js"
import { Emitter } from "../trajectory/observers.js"
import type { Listener, TurnEvent } from "../../Trajectory.js"

/** What the run's queue carries: items, and batches of turn events (when events are on). */
export type Out = Item | ReadonlyArray<TurnEvent>

/** Most events a batch holds before it is handed to the queue (sooner when the consumer waits). */
const EVENT_BATCH = 512

/**
 * A trajectory hands the batch to the queue after a transition when the batch is full or the
 * consumer is waiting for more (so events come in large chunks under load, and without delay when
 * the consumer is idle), and the run hands it over before it offers a group (so a group comes after
 * its trajectories' events).
 */
export class EventSink<E> {
  private batch: Array<TurnEvent> = []
  private readonly push = (event: TurnEvent): void => {
    this.batch.push(event)
  }
  private readonly drain = (): Effect.Effect<void> | undefined => {
    const batch = this.batch
    if (batch.length === 0) return undefined
    if (batch.length < EVENT_BATCH) {
      // Asked after every transition of every trajectory, inside the loop's synchronous fast path:
      // `Queue.size` (an Effect) would cost a trip through the runtime per transition.
      if (Queue.sizeUnsafe(this.queue) > 0) return undefined
    }
    return this.flush()
  }

  constructor(private readonly queue: Queue.Queue<Out, E>) {}

  listener(request: TrajectoryRequest, attempt: number): Listener {
    return new Emitter(request, this.push, this.drain, attempt)
  }

  /** Hands what is buffered to the queue (waiting for room). */
  flush(): Effect.Effect<void> | undefined {
    const batch = this.batch
    if (batch.length === 0) return undefined
    this.batch = []
    return Queue.offer(this.queue, batch)
  }
}
