/**
 * "A whole number >= n": the one check (and the one wording) behind every count, limit and size
 * setting, whether it comes from the command line, a schema, an HTTP body or library options.
 */

/** Whether `value` is a whole number (a safe integer) of at least `min`. */
export const isWhole = (value: number, min: number): boolean => Number.isSafeInteger(value) && value >= min

/** `must be a whole number >= min, got value`, or `undefined` when it is one. */
export const wholeProblem = (value: number, min: number): string | undefined =>
  isWhole(value, min) ? undefined : `must be a whole number >= ${min}, got ${value}`

/** {@link wholeProblem} of an optional setting, prefixed with its option's name. */
export const optionProblem = (option: string, value: number | undefined, min: number): string | undefined => {
  const problem = value === undefined ? undefined : wholeProblem(value, min)
  return problem === undefined ? undefined : `${option}: ${problem}`
}
