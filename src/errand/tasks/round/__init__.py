"""A task's round, written once for every engine: its order, steps, prompt, environment and memory link."""
