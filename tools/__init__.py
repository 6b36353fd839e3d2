"""Scripts run from the repository root next to the program, never by it: docs/graph.md's
generator and the adoption preview gate."""
