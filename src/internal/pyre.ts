/**
 * Python `re` character classes for `str` patterns, so that regexes ported from the reference match
 * exactly what they match in Python (JavaScript's `\s` and `\b` differ on some Unicode characters).
 */

/** Python's `\s`: the characters for which `str.isspace()` is true. */
export const PY_SPACE =
  "[\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]"

/** Python's `\w`: letters, numbers and underscore (combining marks are not word characters). */
export const PY_WORD = "[\\p{L}\\p{N}_]"
