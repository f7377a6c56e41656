"""A project whose memories crowd a task's query: ten conventions that match it better than
the one pitfall that matters (used by the memory and the engine tests of reserved places)."""

QUERY = "Speed up the parser's tokenizer loop"
CONVENTIONS = [
    "The parser's tokenizer loop reads one character at a time from a memoryview.",
    "Parser tokens are namedtuples; the tokenizer loop yields them lazily.",
    "Keep the tokenizer loop in parser/lex.py free of regular expressions.",
    "The parser reports positions as (line, column) pairs counted from one.",
    "Benchmarks for the parser and its tokenizer live in bench/parse_speed.py.",
    "Parser error messages quote the offending token and its column.",
    "The tokenizer loop dispatches on the first character through a dict of handlers.",
    "Speed work on the parser is measured with pyperf, never with timeit.",
    "Parser modules use __slots__ on every token class for speed.",
    "The tokenizer emits an INDENT token before DEDENT handling in the parser loop.",
]
PITFALL = "Caching tokens across calls broke reentrancy once: the tokenizer must keep no module-level state."
